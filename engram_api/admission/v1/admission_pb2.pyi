from engram_api.common.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RequestAdmissionRequest(_message.Message):
    __slots__ = ("caller", "candidate_id", "idempotency_key", "operation_digest")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    candidate_id: str
    idempotency_key: str
    operation_digest: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., candidate_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., operation_digest: _Optional[str] = ...) -> None: ...

class RequestAdmissionResponse(_message.Message):
    __slots__ = ("value_json",)
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    value_json: bytes
    def __init__(self, value_json: _Optional[bytes] = ...) -> None: ...
