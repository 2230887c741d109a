"""The SPEC §4 error table: every code, its retriable flag, constant messages, gRPC mapping."""

from __future__ import annotations

import grpc
import pytest

from engram_core.errors import ERRORS, Code, EngramError, ProtocolRefusal
from engram_core.grpc_errors import ERROR_CODE_KEY, STATUS_FOR, error_from_rpc

RETRIABLE = {
    "MUTATION_OUTCOME_UNKNOWN", "RATE_LIMITED", "DEADLINE_EXCEEDED", "CANCELLED", "STORE_UNAVAILABLE",
    "FENCE_LOST", "CURSOR_GAP", "POLICY_UNAVAILABLE", "POLICY_STALE", "PROJECTION_STALE", "RANKING_UNAVAILABLE",
}
NOT_RETRIABLE = {
    "INVALID_SCHEMA", "INVALID_DIGEST", "UNAUTHORIZED", "AUTHORIZATION_EXPIRED", "AUTHORIZATION_REVOKED",
    "NOT_FOUND", "DIGEST_CONFLICT", "ILLEGAL_TRANSITION", "ALREADY_TERMINAL", "gate_failed", "STALE_PAGE",
    "RESULT_TOO_LARGE", "PROJECTION_OVERSIZED", "CAPABILITY_UNAVAILABLE", "JOURNAL_CORRUPT", "BLOB_MISSING",
    "REGISTRY_VERSION_UNAVAILABLE", "BACKUP_INVALID", "RESTORE_REFUSED", "MIGRATION_LEDGER_INVALID",
}


def test_the_table_is_exactly_the_spec() -> None:
    assert {c.value for c in Code} == RETRIABLE | NOT_RETRIABLE
    for code in Code:
        assert ERRORS[code].retriable is (code.value in RETRIABLE), code


def test_messages_are_constant_and_distinct() -> None:
    messages = [spec.message for spec in ERRORS.values()]
    assert len(set(messages)) == len(messages)
    error = EngramError(Code.NOT_FOUND)
    assert error.to_json() == {"code": "NOT_FOUND", "message": ERRORS[Code.NOT_FOUND].message, "retriable": False}


class FakeRpcError(grpc.RpcError):
    def __init__(self, status: grpc.StatusCode, metadata: tuple = ()) -> None:
        self._status, self._metadata = status, metadata

    def code(self) -> grpc.StatusCode:
        return self._status

    def trailing_metadata(self) -> tuple:
        return self._metadata


@pytest.mark.parametrize("code", list(Code))
def test_every_code_survives_the_grpc_boundary(code: Code) -> None:
    rpc = FakeRpcError(STATUS_FOR[code], ((ERROR_CODE_KEY, code.value),))
    assert error_from_rpc(rpc).code is code


def test_foreign_statuses_map_to_transient_codes() -> None:
    assert error_from_rpc(FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED)).code is Code.DEADLINE_EXCEEDED
    assert error_from_rpc(FakeRpcError(grpc.StatusCode.UNAVAILABLE)).code is Code.STORE_UNAVAILABLE
    assert error_from_rpc(FakeRpcError(grpc.StatusCode.INTERNAL, ((ERROR_CODE_KEY, "BOGUS"),))).code is Code.STORE_UNAVAILABLE


def test_protocol_refusals_have_the_exact_messages() -> None:
    assert (ProtocolRefusal.untrusted().jsonrpc_code, str(ProtocolRefusal.untrusted())) == (-32603, "Trusted invocation context unavailable")
    assert (ProtocolRefusal.unknown_tool().jsonrpc_code, str(ProtocolRefusal.unknown_tool())) == (-32602, "Unknown tool")
