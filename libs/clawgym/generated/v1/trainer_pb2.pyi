from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class TrainerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrainerStatus(_message.Message):
    __slots__ = ("run_id", "step", "policy_version", "state", "metrics_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    METRICS_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    step: int
    policy_version: int
    state: str
    metrics_json: str
    def __init__(self, run_id: _Optional[str] = ..., step: _Optional[int] = ..., policy_version: _Optional[int] = ..., state: _Optional[str] = ..., metrics_json: _Optional[str] = ...) -> None: ...
