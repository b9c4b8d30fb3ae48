from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Run(_message.Message):
    __slots__ = ("id", "name", "config_json", "status", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    config_json: str
    status: str
    created_at: float
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., config_json: _Optional[str] = ..., status: _Optional[str] = ..., created_at: _Optional[float] = ...) -> None: ...

class CreateRunRequest(_message.Message):
    __slots__ = ("name", "config_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    config_json: str
    def __init__(self, name: _Optional[str] = ..., config_json: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class SetRunStatusRequest(_message.Message):
    __slots__ = ("run_id", "status")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    status: str
    def __init__(self, run_id: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class RolloutSpec(_message.Message):
    __slots__ = ("group_id", "task_id", "harness", "policy_version_start", "orchestrator_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_START_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    task_id: str
    harness: str
    policy_version_start: int
    orchestrator_id: str
    def __init__(self, group_id: _Optional[str] = ..., task_id: _Optional[str] = ..., harness: _Optional[str] = ..., policy_version_start: _Optional[int] = ..., orchestrator_id: _Optional[str] = ...) -> None: ...

class RegisterRolloutsRequest(_message.Message):
    __slots__ = ("run_id", "rollouts")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    rollouts: _containers.RepeatedCompositeFieldContainer[RolloutSpec]
    def __init__(self, run_id: _Optional[str] = ..., rollouts: _Optional[_Iterable[_Union[RolloutSpec, _Mapping]]] = ...) -> None: ...

class RegisteredRollout(_message.Message):
    __slots__ = ("rollout_id", "token")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    token: str
    def __init__(self, rollout_id: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class RegisterRolloutsResponse(_message.Message):
    __slots__ = ("rollouts",)
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    rollouts: _containers.RepeatedCompositeFieldContainer[RegisteredRollout]
    def __init__(self, rollouts: _Optional[_Iterable[_Union[RegisteredRollout, _Mapping]]] = ...) -> None: ...

class ResolveTokenRequest(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: str
    def __init__(self, token: _Optional[str] = ...) -> None: ...

class GetRolloutRequest(_message.Message):
    __slots__ = ("rollout_id",)
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    def __init__(self, rollout_id: _Optional[str] = ...) -> None: ...

class StartRolloutRequest(_message.Message):
    __slots__ = ("rollout_id", "sandbox")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    sandbox: str
    def __init__(self, rollout_id: _Optional[str] = ..., sandbox: _Optional[str] = ...) -> None: ...

class Rollout(_message.Message):
    __slots__ = ("id", "run_id", "group_id", "task_id", "harness", "status", "reward", "passed", "error", "policy_version_start", "sandbox", "timings_json", "created_at", "reward_breakdown_json", "verifier_output", "harness_stderr")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_START_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    REWARD_BREAKDOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    HARNESS_STDERR_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    group_id: str
    task_id: str
    harness: str
    status: str
    reward: float
    passed: bool
    error: str
    policy_version_start: int
    sandbox: str
    timings_json: str
    created_at: float
    reward_breakdown_json: str
    verifier_output: str
    harness_stderr: str
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., group_id: _Optional[str] = ..., task_id: _Optional[str] = ..., harness: _Optional[str] = ..., status: _Optional[str] = ..., reward: _Optional[float] = ..., passed: _Optional[bool] = ..., error: _Optional[str] = ..., policy_version_start: _Optional[int] = ..., sandbox: _Optional[str] = ..., timings_json: _Optional[str] = ..., created_at: _Optional[float] = ..., reward_breakdown_json: _Optional[str] = ..., verifier_output: _Optional[str] = ..., harness_stderr: _Optional[str] = ...) -> None: ...

class FinishRolloutRequest(_message.Message):
    __slots__ = ("rollout_id", "status", "reward", "passed", "error", "timings_json", "reward_breakdown_json", "verifier_output", "harness_stderr")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_JSON_FIELD_NUMBER: _ClassVar[int]
    REWARD_BREAKDOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    HARNESS_STDERR_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    status: str
    reward: float
    passed: bool
    error: str
    timings_json: str
    reward_breakdown_json: str
    verifier_output: str
    harness_stderr: str
    def __init__(self, rollout_id: _Optional[str] = ..., status: _Optional[str] = ..., reward: _Optional[float] = ..., passed: _Optional[bool] = ..., error: _Optional[str] = ..., timings_json: _Optional[str] = ..., reward_breakdown_json: _Optional[str] = ..., verifier_output: _Optional[str] = ..., harness_stderr: _Optional[str] = ...) -> None: ...

class Judgment(_message.Message):
    __slots__ = ("rollout_id", "model", "base_url", "prompt_json", "raw_answer", "score", "rule_scores_json", "error", "latency_s", "attempts", "code_score", "id", "created_at")
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_JSON_FIELD_NUMBER: _ClassVar[int]
    RAW_ANSWER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    RULE_SCORES_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CODE_SCORE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    model: str
    base_url: str
    prompt_json: str
    raw_answer: str
    score: float
    rule_scores_json: str
    error: str
    latency_s: float
    attempts: int
    code_score: float
    id: str
    created_at: float
    def __init__(self, rollout_id: _Optional[str] = ..., model: _Optional[str] = ..., base_url: _Optional[str] = ..., prompt_json: _Optional[str] = ..., raw_answer: _Optional[str] = ..., score: _Optional[float] = ..., rule_scores_json: _Optional[str] = ..., error: _Optional[str] = ..., latency_s: _Optional[float] = ..., attempts: _Optional[int] = ..., code_score: _Optional[float] = ..., id: _Optional[str] = ..., created_at: _Optional[float] = ...) -> None: ...

class RecordJudgmentResponse(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetJudgmentRequest(_message.Message):
    __slots__ = ("rollout_id",)
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    def __init__(self, rollout_id: _Optional[str] = ...) -> None: ...

class ListRolloutsRequest(_message.Message):
    __slots__ = ("run_id", "group_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    group_id: str
    def __init__(self, run_id: _Optional[str] = ..., group_id: _Optional[str] = ...) -> None: ...

class ListRolloutsResponse(_message.Message):
    __slots__ = ("rollouts",)
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    rollouts: _containers.RepeatedCompositeFieldContainer[Rollout]
    def __init__(self, rollouts: _Optional[_Iterable[_Union[Rollout, _Mapping]]] = ...) -> None: ...

class Call(_message.Message):
    __slots__ = ("id", "rollout_id", "seq", "protocol", "request_json", "response_json", "prompt_ids", "output_ids", "output_logprobs", "output_versions", "policy_version", "finish_reason", "latency_s", "headers_json", "created_at", "temperature")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_JSON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    LATENCY_S_FIELD_NUMBER: _ClassVar[int]
    HEADERS_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    id: str
    rollout_id: str
    seq: int
    protocol: str
    request_json: str
    response_json: str
    prompt_ids: bytes
    output_ids: bytes
    output_logprobs: bytes
    output_versions: bytes
    policy_version: int
    finish_reason: str
    latency_s: float
    headers_json: str
    created_at: float
    temperature: float
    def __init__(self, id: _Optional[str] = ..., rollout_id: _Optional[str] = ..., seq: _Optional[int] = ..., protocol: _Optional[str] = ..., request_json: _Optional[str] = ..., response_json: _Optional[str] = ..., prompt_ids: _Optional[bytes] = ..., output_ids: _Optional[bytes] = ..., output_logprobs: _Optional[bytes] = ..., output_versions: _Optional[bytes] = ..., policy_version: _Optional[int] = ..., finish_reason: _Optional[str] = ..., latency_s: _Optional[float] = ..., headers_json: _Optional[str] = ..., created_at: _Optional[float] = ..., temperature: _Optional[float] = ...) -> None: ...

class RecordCallResponse(_message.Message):
    __slots__ = ("call_id",)
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    def __init__(self, call_id: _Optional[str] = ...) -> None: ...

class ListCallsRequest(_message.Message):
    __slots__ = ("rollout_id",)
    ROLLOUT_ID_FIELD_NUMBER: _ClassVar[int]
    rollout_id: str
    def __init__(self, rollout_id: _Optional[str] = ...) -> None: ...

class ListCallsResponse(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    def __init__(self, calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ...) -> None: ...

class GetGroupRequest(_message.Message):
    __slots__ = ("group_id",)
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    def __init__(self, group_id: _Optional[str] = ...) -> None: ...

class RolloutWithCalls(_message.Message):
    __slots__ = ("rollout", "calls")
    ROLLOUT_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    rollout: Rollout
    calls: _containers.RepeatedCompositeFieldContainer[Call]
    def __init__(self, rollout: _Optional[_Union[Rollout, _Mapping]] = ..., calls: _Optional[_Iterable[_Union[Call, _Mapping]]] = ...) -> None: ...

class Group(_message.Message):
    __slots__ = ("id", "run_id", "rollouts")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    rollouts: _containers.RepeatedCompositeFieldContainer[RolloutWithCalls]
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., rollouts: _Optional[_Iterable[_Union[RolloutWithCalls, _Mapping]]] = ...) -> None: ...

class GroupSummary(_message.Message):
    __slots__ = ("id", "run_id", "size", "ended", "ready_at", "consumed_version", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    READY_AT_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    size: int
    ended: int
    ready_at: float
    consumed_version: int
    created_at: float
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., size: _Optional[int] = ..., ended: _Optional[int] = ..., ready_at: _Optional[float] = ..., consumed_version: _Optional[int] = ..., created_at: _Optional[float] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[GroupSummary]
    def __init__(self, groups: _Optional[_Iterable[_Union[GroupSummary, _Mapping]]] = ...) -> None: ...

class WatchGroupsRequest(_message.Message):
    __slots__ = ("run_id", "after_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_id: str
    def __init__(self, run_id: _Optional[str] = ..., after_id: _Optional[str] = ...) -> None: ...

class GroupReady(_message.Message):
    __slots__ = ("group_id", "run_id", "message_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    run_id: str
    message_id: str
    def __init__(self, group_id: _Optional[str] = ..., run_id: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("run_id", "version", "step", "uri", "metrics_json", "created_at", "group_ids")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    version: int
    step: int
    uri: str
    metrics_json: str
    created_at: float
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., version: _Optional[int] = ..., step: _Optional[int] = ..., uri: _Optional[str] = ..., metrics_json: _Optional[str] = ..., created_at: _Optional[float] = ..., group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class ListUnconsumedGroupsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListUnconsumedGroupsResponse(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class OpenGroupVersionsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class OpenGroupVersionsResponse(_message.Message):
    __slots__ = ("oldest_versions",)
    class OldestVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    OLDEST_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    oldest_versions: _containers.ScalarMap[str, int]
    def __init__(self, oldest_versions: _Optional[_Mapping[str, int]] = ...) -> None: ...

class OrchestratorHeartbeatRequest(_message.Message):
    __slots__ = ("instance_id", "name", "lease_s")
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEASE_S_FIELD_NUMBER: _ClassVar[int]
    instance_id: str
    name: str
    lease_s: float
    def __init__(self, instance_id: _Optional[str] = ..., name: _Optional[str] = ..., lease_s: _Optional[float] = ...) -> None: ...

class OrchestratorHeartbeatResponse(_message.Message):
    __slots__ = ("failed_rollout_ids",)
    FAILED_ROLLOUT_IDS_FIELD_NUMBER: _ClassVar[int]
    failed_rollout_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, failed_rollout_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class TrainStep(_message.Message):
    __slots__ = ("run_id", "step", "metrics_json", "created_at")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    metrics_json: str
    created_at: float
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., metrics_json: _Optional[str] = ..., created_at: _Optional[float] = ...) -> None: ...

class ListTrainStepsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListTrainStepsResponse(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[TrainStep]
    def __init__(self, steps: _Optional[_Iterable[_Union[TrainStep, _Mapping]]] = ...) -> None: ...

class Eval(_message.Message):
    __slots__ = ("run_id", "version", "suite", "harness", "metrics_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SUITE_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    version: int
    suite: str
    harness: str
    metrics_json: str
    def __init__(self, run_id: _Optional[str] = ..., version: _Optional[int] = ..., suite: _Optional[str] = ..., harness: _Optional[str] = ..., metrics_json: _Optional[str] = ...) -> None: ...

class ListEvalsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class ListEvalsResponse(_message.Message):
    __slots__ = ("evals",)
    EVALS_FIELD_NUMBER: _ClassVar[int]
    evals: _containers.RepeatedCompositeFieldContainer[Eval]
    def __init__(self, evals: _Optional[_Iterable[_Union[Eval, _Mapping]]] = ...) -> None: ...
