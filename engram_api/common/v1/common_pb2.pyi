from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    INVALID_SCHEMA: _ClassVar[ErrorCode]
    INVALID_DIGEST: _ClassVar[ErrorCode]
    UNAUTHORIZED: _ClassVar[ErrorCode]
    AUTHORIZATION_EXPIRED: _ClassVar[ErrorCode]
    AUTHORIZATION_REVOKED: _ClassVar[ErrorCode]
    NOT_FOUND: _ClassVar[ErrorCode]
    DIGEST_CONFLICT: _ClassVar[ErrorCode]
    ILLEGAL_TRANSITION: _ClassVar[ErrorCode]
    ALREADY_TERMINAL: _ClassVar[ErrorCode]
    GATE_FAILED: _ClassVar[ErrorCode]
    MUTATION_OUTCOME_UNKNOWN: _ClassVar[ErrorCode]
    STALE_PAGE: _ClassVar[ErrorCode]
    RESULT_TOO_LARGE: _ClassVar[ErrorCode]
    PROJECTION_OVERSIZED: _ClassVar[ErrorCode]
    RATE_LIMITED: _ClassVar[ErrorCode]
    DEADLINE_EXCEEDED: _ClassVar[ErrorCode]
    CANCELLED: _ClassVar[ErrorCode]
    STORE_UNAVAILABLE: _ClassVar[ErrorCode]
    FENCE_LOST: _ClassVar[ErrorCode]
    CURSOR_GAP: _ClassVar[ErrorCode]
    POLICY_UNAVAILABLE: _ClassVar[ErrorCode]
    POLICY_STALE: _ClassVar[ErrorCode]
    PROJECTION_STALE: _ClassVar[ErrorCode]
    RANKING_UNAVAILABLE: _ClassVar[ErrorCode]
    CAPABILITY_UNAVAILABLE: _ClassVar[ErrorCode]
    JOURNAL_CORRUPT: _ClassVar[ErrorCode]
    BLOB_MISSING: _ClassVar[ErrorCode]
    REGISTRY_VERSION_UNAVAILABLE: _ClassVar[ErrorCode]
    BACKUP_INVALID: _ClassVar[ErrorCode]
    RESTORE_REFUSED: _ClassVar[ErrorCode]
    MIGRATION_LEDGER_INVALID: _ClassVar[ErrorCode]
ERROR_CODE_UNSPECIFIED: ErrorCode
INVALID_SCHEMA: ErrorCode
INVALID_DIGEST: ErrorCode
UNAUTHORIZED: ErrorCode
AUTHORIZATION_EXPIRED: ErrorCode
AUTHORIZATION_REVOKED: ErrorCode
NOT_FOUND: ErrorCode
DIGEST_CONFLICT: ErrorCode
ILLEGAL_TRANSITION: ErrorCode
ALREADY_TERMINAL: ErrorCode
GATE_FAILED: ErrorCode
MUTATION_OUTCOME_UNKNOWN: ErrorCode
STALE_PAGE: ErrorCode
RESULT_TOO_LARGE: ErrorCode
PROJECTION_OVERSIZED: ErrorCode
RATE_LIMITED: ErrorCode
DEADLINE_EXCEEDED: ErrorCode
CANCELLED: ErrorCode
STORE_UNAVAILABLE: ErrorCode
FENCE_LOST: ErrorCode
CURSOR_GAP: ErrorCode
POLICY_UNAVAILABLE: ErrorCode
POLICY_STALE: ErrorCode
PROJECTION_STALE: ErrorCode
RANKING_UNAVAILABLE: ErrorCode
CAPABILITY_UNAVAILABLE: ErrorCode
JOURNAL_CORRUPT: ErrorCode
BLOB_MISSING: ErrorCode
REGISTRY_VERSION_UNAVAILABLE: ErrorCode
BACKUP_INVALID: ErrorCode
RESTORE_REFUSED: ErrorCode
MIGRATION_LEDGER_INVALID: ErrorCode

class Scope(_message.Message):
    __slots__ = ("tenant", "workspace")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    workspace: str
    def __init__(self, tenant: _Optional[str] = ..., workspace: _Optional[str] = ...) -> None: ...

class Caller(_message.Message):
    __slots__ = ("scope", "principal", "agent_id", "session", "audit_id", "purpose_ref", "context_token", "confirmation_token")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_ID_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_REF_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONFIRMATION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    principal: str
    agent_id: str
    session: str
    audit_id: str
    purpose_ref: str
    context_token: str
    confirmation_token: str
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., principal: _Optional[str] = ..., agent_id: _Optional[str] = ..., session: _Optional[str] = ..., audit_id: _Optional[str] = ..., purpose_ref: _Optional[str] = ..., context_token: _Optional[str] = ..., confirmation_token: _Optional[str] = ...) -> None: ...

class Cursor(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: str
    def __init__(self, value: _Optional[str] = ...) -> None: ...
