from engram_api.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchRequest(_message.Message):
    __slots__ = ("caller", "arguments_json", "policy_json", "head_cursor")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    HEAD_CURSOR_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    arguments_json: bytes
    policy_json: bytes
    head_cursor: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., arguments_json: _Optional[bytes] = ..., policy_json: _Optional[bytes] = ..., head_cursor: _Optional[str] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("value_json",)
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    value_json: bytes
    def __init__(self, value_json: _Optional[bytes] = ...) -> None: ...

class InvalidateRequest(_message.Message):
    __slots__ = ("scope", "record_id", "whole_scope")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    WHOLE_SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    record_id: str
    whole_scope: bool
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., record_id: _Optional[str] = ..., whole_scope: _Optional[bool] = ...) -> None: ...

class InvalidateResponse(_message.Message):
    __slots__ = ("surfaces", "replica_id")
    SURFACES_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    surfaces: _containers.RepeatedScalarFieldContainer[str]
    replica_id: str
    def __init__(self, surfaces: _Optional[_Iterable[str]] = ..., replica_id: _Optional[str] = ...) -> None: ...
