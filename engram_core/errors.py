"""The error vocabulary of SPEC §4: one table, constant messages, retriable flags.

Every failure that reaches a client is an :class:`EngramError` carrying one of these codes.
Messages are constant per code and never contain user data, ids or internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Code(str, Enum):
    INVALID_SCHEMA = "INVALID_SCHEMA"
    INVALID_DIGEST = "INVALID_DIGEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    AUTHORIZATION_EXPIRED = "AUTHORIZATION_EXPIRED"
    AUTHORIZATION_REVOKED = "AUTHORIZATION_REVOKED"
    NOT_FOUND = "NOT_FOUND"
    DIGEST_CONFLICT = "DIGEST_CONFLICT"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    ALREADY_TERMINAL = "ALREADY_TERMINAL"
    GATE_FAILED = "gate_failed"
    MUTATION_OUTCOME_UNKNOWN = "MUTATION_OUTCOME_UNKNOWN"
    STALE_PAGE = "STALE_PAGE"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    PROJECTION_OVERSIZED = "PROJECTION_OVERSIZED"
    RATE_LIMITED = "RATE_LIMITED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    CANCELLED = "CANCELLED"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    FENCE_LOST = "FENCE_LOST"
    CURSOR_GAP = "CURSOR_GAP"
    POLICY_UNAVAILABLE = "POLICY_UNAVAILABLE"
    POLICY_STALE = "POLICY_STALE"
    PROJECTION_STALE = "PROJECTION_STALE"
    RANKING_UNAVAILABLE = "RANKING_UNAVAILABLE"
    CAPABILITY_UNAVAILABLE = "CAPABILITY_UNAVAILABLE"
    JOURNAL_CORRUPT = "JOURNAL_CORRUPT"
    BLOB_MISSING = "BLOB_MISSING"
    REGISTRY_VERSION_UNAVAILABLE = "REGISTRY_VERSION_UNAVAILABLE"
    BACKUP_INVALID = "BACKUP_INVALID"
    RESTORE_REFUSED = "RESTORE_REFUSED"
    MIGRATION_LEDGER_INVALID = "MIGRATION_LEDGER_INVALID"


@dataclass(frozen=True)
class ErrorSpec:
    code: Code
    retriable: bool
    message: str


_TABLE: tuple[ErrorSpec, ...] = (
    ErrorSpec(Code.INVALID_SCHEMA, False, "The arguments do not match the tool's input schema."),
    ErrorSpec(Code.INVALID_DIGEST, False, "A digest field is malformed."),
    ErrorSpec(Code.UNAUTHORIZED, False, "The operation is not authorized."),
    ErrorSpec(Code.AUTHORIZATION_EXPIRED, False, "The authorization behind this call has expired."),
    ErrorSpec(Code.AUTHORIZATION_REVOKED, False, "The authorization behind this call was revoked."),
    ErrorSpec(Code.NOT_FOUND, False, "The target was not found."),
    ErrorSpec(Code.DIGEST_CONFLICT, False, "The idempotency key was already used for another operation."),
    ErrorSpec(Code.ILLEGAL_TRANSITION, False, "The lifecycle does not allow this transition."),
    ErrorSpec(Code.ALREADY_TERMINAL, False, "The target is already in its terminal state."),
    ErrorSpec(Code.GATE_FAILED, False, "The confirmation is not valid for this operation."),
    ErrorSpec(Code.MUTATION_OUTCOME_UNKNOWN, True, "The outcome is unknown; retry with the same key and arguments."),
    ErrorSpec(Code.STALE_PAGE, False, "The page cursor is no longer valid; search again without it."),
    ErrorSpec(Code.RESULT_TOO_LARGE, False, "The result cannot fit the packet budget."),
    ErrorSpec(Code.PROJECTION_OVERSIZED, False, "A record's projection exceeds the packet budget."),
    ErrorSpec(Code.RATE_LIMITED, True, "Too many requests; back off and retry."),
    ErrorSpec(Code.DEADLINE_EXCEEDED, True, "The deadline was exceeded."),
    ErrorSpec(Code.CANCELLED, True, "The call was cancelled."),
    ErrorSpec(Code.STORE_UNAVAILABLE, True, "The store is temporarily unavailable."),
    ErrorSpec(Code.FENCE_LOST, True, "A concurrent writer took over; retry."),
    ErrorSpec(Code.CURSOR_GAP, True, "The journal has a gap; retry."),
    ErrorSpec(Code.POLICY_UNAVAILABLE, True, "The policy is temporarily unavailable."),
    ErrorSpec(Code.POLICY_STALE, True, "The policy changed during the call; retry."),
    ErrorSpec(Code.PROJECTION_STALE, True, "The projection is behind the journal; retry."),
    ErrorSpec(Code.RANKING_UNAVAILABLE, True, "A required ranking channel is unavailable."),
    ErrorSpec(Code.CAPABILITY_UNAVAILABLE, False, "A required capability is unavailable."),
    ErrorSpec(Code.JOURNAL_CORRUPT, False, "The journal failed verification."),
    ErrorSpec(Code.BLOB_MISSING, False, "Stored content is missing."),
    ErrorSpec(Code.REGISTRY_VERSION_UNAVAILABLE, False, "The registry version is unavailable."),
    ErrorSpec(Code.BACKUP_INVALID, False, "The backup is invalid."),
    ErrorSpec(Code.RESTORE_REFUSED, False, "The restore was refused."),
    ErrorSpec(Code.MIGRATION_LEDGER_INVALID, False, "The migration ledger is invalid."),
)

ERRORS: dict[Code, ErrorSpec] = {spec.code: spec for spec in _TABLE}

# JSON-RPC protocol refusals (SPEC §1.6): not memory answers, never envelopes.
JSONRPC_INVALID_PARAMS = -32602
JSONRPC_INTERNAL_ERROR = -32603
UNKNOWN_TOOL_MESSAGE = "Unknown tool"
UNTRUSTED_CONTEXT_MESSAGE = "Trusted invocation context unavailable"


class EngramError(Exception):
    """A contract error with one of the SPEC §4 codes. Its text is the constant message."""

    def __init__(self, code: Code) -> None:
        self.code = code
        self.spec = ERRORS[code]
        super().__init__(self.spec.message)

    @property
    def retriable(self) -> bool:
        return self.spec.retriable

    @property
    def message(self) -> str:
        return self.spec.message

    def to_json(self) -> dict[str, object]:
        return {"code": self.code.value, "message": self.spec.message, "retriable": self.spec.retriable}


class ProtocolRefusal(Exception):
    """A JSON-RPC protocol error (SPEC §1.6): -32603 untrusted context or -32602 unknown tool."""

    def __init__(self, jsonrpc_code: int) -> None:
        if jsonrpc_code == JSONRPC_INTERNAL_ERROR:
            message = UNTRUSTED_CONTEXT_MESSAGE
        elif jsonrpc_code == JSONRPC_INVALID_PARAMS:
            message = UNKNOWN_TOOL_MESSAGE
        else:
            raise ValueError("unsupported protocol refusal code")
        self.jsonrpc_code = jsonrpc_code
        super().__init__(message)

    @classmethod
    def untrusted(cls) -> "ProtocolRefusal":
        return cls(JSONRPC_INTERNAL_ERROR)

    @classmethod
    def unknown_tool(cls) -> "ProtocolRefusal":
        return cls(JSONRPC_INVALID_PARAMS)
