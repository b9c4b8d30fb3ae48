from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RolloutRequest(_message.Message):
    __slots__ = ("task_id", "harness", "samples")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    harness: str
    samples: int
    def __init__(self, task_id: _Optional[str] = ..., harness: _Optional[str] = ..., samples: _Optional[int] = ...) -> None: ...

class RunRolloutsRequest(_message.Message):
    __slots__ = ("run_id", "batch_id", "suite", "rollouts", "policy_version", "proxy_url")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    SUITE_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROXY_URL_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    batch_id: str
    suite: str
    rollouts: _containers.RepeatedCompositeFieldContainer[RolloutRequest]
    policy_version: int
    proxy_url: str
    def __init__(self, run_id: _Optional[str] = ..., batch_id: _Optional[str] = ..., suite: _Optional[str] = ..., rollouts: _Optional[_Iterable[_Union[RolloutRequest, _Mapping]]] = ..., policy_version: _Optional[int] = ..., proxy_url: _Optional[str] = ...) -> None: ...

class RolloutStatus(_message.Message):
    __slots__ = ("rollout_id", "group_id", "task_id", "harness", "state", "reward", "passed", "error", "failure", "retrying", "attempt", "batch_id", "reward_breakdown_json")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    RETRYING_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    REWARD_BREAKDOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    group_id: str
    task_id: str
    harness: str
    state: str
    reward: float
    passed: bool
    error: str
    failure: str
    retrying: bool
    attempt: int
    batch_id: str
    reward_breakdown_json: str
    def __init__(self, rollout_id: _Optional[str] = ..., group_id: _Optional[str] = ..., task_id: _Optional[str] = ..., harness: _Optional[str] = ..., state: _Optional[str] = ..., reward: _Optional[float] = ..., passed: _Optional[bool] = ..., error: _Optional[str] = ..., failure: _Optional[str] = ..., retrying: _Optional[bool] = ..., attempt: _Optional[int] = ..., batch_id: _Optional[str] = ..., reward_breakdown_json: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("batch_id", "rollout_id")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    rollout_id: str
    def __init__(self, batch_id: _Optional[str] = ..., rollout_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    def __init__(self, cancelled: _Optional[int] = ...) -> None: ...
