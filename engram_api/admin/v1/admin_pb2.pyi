from engram_api.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnableScopeRequest(_message.Message):
    __slots__ = ("scope", "tools", "confirmation_required", "language")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    tools: _containers.RepeatedScalarFieldContainer[str]
    confirmation_required: _containers.RepeatedScalarFieldContainer[str]
    language: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., confirmation_required: _Optional[_Iterable[str]] = ..., language: _Optional[str] = ...) -> None: ...

class DisableScopeRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ...) -> None: ...

class GetScopeRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ...) -> None: ...

class ScopeState(_message.Message):
    __slots__ = ("scope", "enabled", "policy_json")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    enabled: bool
    policy_json: bytes
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., enabled: _Optional[bool] = ..., policy_json: _Optional[bytes] = ...) -> None: ...
