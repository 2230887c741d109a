from engram_api.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RebuildProjectionRequest(_message.Message):
    __slots__ = ("scope", "reason_ref", "wait_seconds")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    REASON_REF_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    reason_ref: str
    wait_seconds: float
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., reason_ref: _Optional[str] = ..., wait_seconds: _Optional[float] = ...) -> None: ...

class ObjectHistoryRequest(_message.Message):
    __slots__ = ("scope", "object_id")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    object_id: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., object_id: _Optional[str] = ...) -> None: ...

class VerifyJournalRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ...) -> None: ...

class JsonResponse(_message.Message):
    __slots__ = ("value_json",)
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    value_json: bytes
    def __init__(self, value_json: _Optional[bytes] = ...) -> None: ...

class ListPendingRequest(_message.Message):
    __slots__ = ("scope", "limit", "after_candidate_id")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    AFTER_CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    limit: int
    after_candidate_id: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., limit: _Optional[int] = ..., after_candidate_id: _Optional[str] = ...) -> None: ...

class ListPendingResponse(_message.Message):
    __slots__ = ("candidates_json",)
    CANDIDATES_JSON_FIELD_NUMBER: _ClassVar[int]
    candidates_json: bytes
    def __init__(self, candidates_json: _Optional[bytes] = ...) -> None: ...

class AdjudicateRequest(_message.Message):
    __slots__ = ("scope", "candidate_id", "decision", "reason_ref")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_REF_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    candidate_id: str
    decision: str
    reason_ref: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., candidate_id: _Optional[str] = ..., decision: _Optional[str] = ..., reason_ref: _Optional[str] = ...) -> None: ...

class RevealCandidateRequest(_message.Message):
    __slots__ = ("scope", "candidate_id", "reason_ref")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_REF_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    candidate_id: str
    reason_ref: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., candidate_id: _Optional[str] = ..., reason_ref: _Optional[str] = ...) -> None: ...

class AdjudicateResponse(_message.Message):
    __slots__ = ("outcome_json",)
    OUTCOME_JSON_FIELD_NUMBER: _ClassVar[int]
    outcome_json: bytes
    def __init__(self, outcome_json: _Optional[bytes] = ...) -> None: ...

class TransitionRecordRequest(_message.Message):
    __slots__ = ("scope", "record_id", "operation", "to_state", "related_record_id", "reason_ref")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    RELATED_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_REF_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    record_id: str
    operation: str
    to_state: str
    related_record_id: str
    reason_ref: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., record_id: _Optional[str] = ..., operation: _Optional[str] = ..., to_state: _Optional[str] = ..., related_record_id: _Optional[str] = ..., reason_ref: _Optional[str] = ...) -> None: ...

class TransitionRecordResponse(_message.Message):
    __slots__ = ("value_json",)
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    value_json: bytes
    def __init__(self, value_json: _Optional[bytes] = ...) -> None: ...

class EnableScopeRequest(_message.Message):
    __slots__ = ("scope", "tools", "confirmation_required", "language", "expected_version", "actor_ref")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_REF_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    tools: _containers.RepeatedScalarFieldContainer[str]
    confirmation_required: _containers.RepeatedScalarFieldContainer[str]
    language: str
    expected_version: int
    actor_ref: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., confirmation_required: _Optional[_Iterable[str]] = ..., language: _Optional[str] = ..., expected_version: _Optional[int] = ..., actor_ref: _Optional[str] = ...) -> None: ...

class DisableScopeRequest(_message.Message):
    __slots__ = ("scope", "expected_version", "actor_ref")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_REF_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    expected_version: int
    actor_ref: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., expected_version: _Optional[int] = ..., actor_ref: _Optional[str] = ...) -> None: ...

class UpdatePolicyRequest(_message.Message):
    __slots__ = ("scope", "changes_json", "expected_version", "actor_ref")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CHANGES_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_REF_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    changes_json: bytes
    expected_version: int
    actor_ref: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., changes_json: _Optional[bytes] = ..., expected_version: _Optional[int] = ..., actor_ref: _Optional[str] = ...) -> None: ...

class GetScopeRequest(_message.Message):
    __slots__ = ("scope",)
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ...) -> None: ...

class ScopeState(_message.Message):
    __slots__ = ("scope", "enabled", "policy_json", "version", "change_cursor", "changed_members")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANGE_CURSOR_FIELD_NUMBER: _ClassVar[int]
    CHANGED_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    enabled: bool
    policy_json: bytes
    version: int
    change_cursor: int
    changed_members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., enabled: _Optional[bool] = ..., policy_json: _Optional[bytes] = ..., version: _Optional[int] = ..., change_cursor: _Optional[int] = ..., changed_members: _Optional[_Iterable[str]] = ...) -> None: ...
