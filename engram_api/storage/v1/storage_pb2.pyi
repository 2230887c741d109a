from engram_api.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CaptureRequest(_message.Message):
    __slots__ = ("caller", "idempotency_key", "operation_digest", "payload_json", "evidence_json")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    idempotency_key: str
    operation_digest: str
    payload_json: bytes
    evidence_json: bytes
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., operation_digest: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., evidence_json: _Optional[bytes] = ...) -> None: ...

class TransitionRequest(_message.Message):
    __slots__ = ("caller", "idempotency_key", "operation_digest", "target", "reason_ref")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATION_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REASON_REF_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    idempotency_key: str
    operation_digest: str
    target: str
    reason_ref: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., operation_digest: _Optional[str] = ..., target: _Optional[str] = ..., reason_ref: _Optional[str] = ...) -> None: ...

class MutationResponse(_message.Message):
    __slots__ = ("value_json", "replayed")
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    value_json: bytes
    replayed: bool
    def __init__(self, value_json: _Optional[bytes] = ..., replayed: _Optional[bool] = ...) -> None: ...

class GetRecordRequest(_message.Message):
    __slots__ = ("caller", "record_id")
    CALLER_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    caller: _common_pb2.Caller
    record_id: str
    def __init__(self, caller: _Optional[_Union[_common_pb2.Caller, _Mapping]] = ..., record_id: _Optional[str] = ...) -> None: ...

class GetRecordResponse(_message.Message):
    __slots__ = ("record_json", "record_digest", "valid_as_of_ms", "system_as_of", "validated_through_cursor")
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    RECORD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VALID_AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_AS_OF_FIELD_NUMBER: _ClassVar[int]
    VALIDATED_THROUGH_CURSOR_FIELD_NUMBER: _ClassVar[int]
    record_json: bytes
    record_digest: str
    valid_as_of_ms: int
    system_as_of: str
    validated_through_cursor: str
    def __init__(self, record_json: _Optional[bytes] = ..., record_digest: _Optional[str] = ..., valid_as_of_ms: _Optional[int] = ..., system_as_of: _Optional[str] = ..., validated_through_cursor: _Optional[str] = ...) -> None: ...

class GetScopePolicyRequest(_message.Message):
    __slots__ = ("scope", "with_head_cursor")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    WITH_HEAD_CURSOR_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    with_head_cursor: bool
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., with_head_cursor: _Optional[bool] = ...) -> None: ...

class ScopePolicyResponse(_message.Message):
    __slots__ = ("policy_json", "head_cursor")
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    HEAD_CURSOR_FIELD_NUMBER: _ClassVar[int]
    policy_json: bytes
    head_cursor: str
    def __init__(self, policy_json: _Optional[bytes] = ..., head_cursor: _Optional[str] = ...) -> None: ...

class BeginAdmissionRequest(_message.Message):
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

class BeginAdmissionResponse(_message.Message):
    __slots__ = ("outcome_json", "request_id", "fresh")
    OUTCOME_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FRESH_FIELD_NUMBER: _ClassVar[int]
    outcome_json: bytes
    request_id: str
    fresh: bool
    def __init__(self, outcome_json: _Optional[bytes] = ..., request_id: _Optional[str] = ..., fresh: _Optional[bool] = ...) -> None: ...

class OpenCandidateRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class OpenCandidateResponse(_message.Message):
    __slots__ = ("payload_json", "evidence_json", "policy_json", "duplicate_of_record_id", "matches_forgotten", "outcome_json", "tenant", "workspace")
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_JSON_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_OF_RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FORGOTTEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_JSON_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    payload_json: bytes
    evidence_json: bytes
    policy_json: bytes
    duplicate_of_record_id: str
    matches_forgotten: bool
    outcome_json: bytes
    tenant: str
    workspace: str
    def __init__(self, payload_json: _Optional[bytes] = ..., evidence_json: _Optional[bytes] = ..., policy_json: _Optional[bytes] = ..., duplicate_of_record_id: _Optional[str] = ..., matches_forgotten: _Optional[bool] = ..., outcome_json: _Optional[bytes] = ..., tenant: _Optional[str] = ..., workspace: _Optional[str] = ...) -> None: ...

class CommitDecisionRequest(_message.Message):
    __slots__ = ("request_id", "decision", "reason", "trust")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    decision: str
    reason: str
    trust: str
    def __init__(self, request_id: _Optional[str] = ..., decision: _Optional[str] = ..., reason: _Optional[str] = ..., trust: _Optional[str] = ...) -> None: ...

class CommitDecisionResponse(_message.Message):
    __slots__ = ("outcome_json",)
    OUTCOME_JSON_FIELD_NUMBER: _ClassVar[int]
    outcome_json: bytes
    def __init__(self, outcome_json: _Optional[bytes] = ...) -> None: ...

class ReadJournalRequest(_message.Message):
    __slots__ = ("scope", "after_cursor", "limit")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    after_cursor: str
    limit: int
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., after_cursor: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class JournalEvent(_message.Message):
    __slots__ = ("cursor", "operation", "object_id", "from_state", "to_state", "event_digest")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    EVENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    cursor: str
    operation: str
    object_id: str
    from_state: str
    to_state: str
    event_digest: str
    def __init__(self, cursor: _Optional[str] = ..., operation: _Optional[str] = ..., object_id: _Optional[str] = ..., from_state: _Optional[str] = ..., to_state: _Optional[str] = ..., event_digest: _Optional[str] = ...) -> None: ...

class ReadJournalResponse(_message.Message):
    __slots__ = ("events", "head_cursor")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    HEAD_CURSOR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[JournalEvent]
    head_cursor: str
    def __init__(self, events: _Optional[_Iterable[_Union[JournalEvent, _Mapping]]] = ..., head_cursor: _Optional[str] = ...) -> None: ...

class FetchRecordsRequest(_message.Message):
    __slots__ = ("scope", "record_ids", "vector_model")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    vector_model: str
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., record_ids: _Optional[_Iterable[str]] = ..., vector_model: _Optional[str] = ...) -> None: ...

class IndexableRecord(_message.Message):
    __slots__ = ("record_id", "state", "record_json", "vectors")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RECORD_JSON_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    state: str
    record_json: bytes
    vectors: bytes
    def __init__(self, record_id: _Optional[str] = ..., state: _Optional[str] = ..., record_json: _Optional[bytes] = ..., vectors: _Optional[bytes] = ...) -> None: ...

class RecordVectors(_message.Message):
    __slots__ = ("record_id", "vectors")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    vectors: bytes
    def __init__(self, record_id: _Optional[str] = ..., vectors: _Optional[bytes] = ...) -> None: ...

class StoreVectorsRequest(_message.Message):
    __slots__ = ("scope", "vector_model", "items")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    scope: _common_pb2.Scope
    vector_model: str
    items: _containers.RepeatedCompositeFieldContainer[RecordVectors]
    def __init__(self, scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., vector_model: _Optional[str] = ..., items: _Optional[_Iterable[_Union[RecordVectors, _Mapping]]] = ...) -> None: ...

class StoreVectorsResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: int
    def __init__(self, stored: _Optional[int] = ...) -> None: ...

class FetchRecordsResponse(_message.Message):
    __slots__ = ("records", "deferred_ids")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_IDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[IndexableRecord]
    deferred_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, records: _Optional[_Iterable[_Union[IndexableRecord, _Mapping]]] = ..., deferred_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DestroyKeyRequest(_message.Message):
    __slots__ = ("outbox_id",)
    OUTBOX_ID_FIELD_NUMBER: _ClassVar[int]
    outbox_id: str
    def __init__(self, outbox_id: _Optional[str] = ...) -> None: ...

class DestroyKeyResponse(_message.Message):
    __slots__ = ("key_destruction_receipt_digest",)
    KEY_DESTRUCTION_RECEIPT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    key_destruction_receipt_digest: str
    def __init__(self, key_destruction_receipt_digest: _Optional[str] = ...) -> None: ...

class RecordCoverageRequest(_message.Message):
    __slots__ = ("outbox_id", "surfaces", "replicas")
    OUTBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SURFACES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    outbox_id: str
    surfaces: _containers.RepeatedScalarFieldContainer[str]
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, outbox_id: _Optional[str] = ..., surfaces: _Optional[_Iterable[str]] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class RecordCoverageResponse(_message.Message):
    __slots__ = ("coverage_receipt_digest",)
    COVERAGE_RECEIPT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    coverage_receipt_digest: str
    def __init__(self, coverage_receipt_digest: _Optional[str] = ...) -> None: ...

class GetOutboxItemRequest(_message.Message):
    __slots__ = ("outbox_id",)
    OUTBOX_ID_FIELD_NUMBER: _ClassVar[int]
    outbox_id: str
    def __init__(self, outbox_id: _Optional[str] = ...) -> None: ...

class OutboxItem(_message.Message):
    __slots__ = ("outbox_id", "task", "scope", "object_id", "state")
    OUTBOX_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    outbox_id: str
    task: str
    scope: _common_pb2.Scope
    object_id: str
    state: str
    def __init__(self, outbox_id: _Optional[str] = ..., task: _Optional[str] = ..., scope: _Optional[_Union[_common_pb2.Scope, _Mapping]] = ..., object_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class SweepExpiredRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class SweepExpiredResponse(_message.Message):
    __slots__ = ("expired", "skipped", "more")
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    expired: int
    skipped: int
    more: bool
    def __init__(self, expired: _Optional[int] = ..., skipped: _Optional[int] = ..., more: _Optional[bool] = ...) -> None: ...
