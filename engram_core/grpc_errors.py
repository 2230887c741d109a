"""The one mapping between contract error codes and gRPC status (both directions).

A servicer raises :class:`EngramError`; :func:`rpc_boundary` turns it into a gRPC status with the
code name in the trailing metadata key ``engram-error-code``. A client turns an ``AioRpcError``
back into the same :class:`EngramError` with :func:`error_from_rpc`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from engram_core.errors import Code, EngramError

ERROR_CODE_KEY = "engram-error-code"
log = logging.getLogger("engram.rpc")

_S = grpc.StatusCode
STATUS_FOR: dict[Code, grpc.StatusCode] = {
    Code.INVALID_SCHEMA: _S.INVALID_ARGUMENT,
    Code.INVALID_DIGEST: _S.INVALID_ARGUMENT,
    Code.UNAUTHORIZED: _S.PERMISSION_DENIED,
    Code.AUTHORIZATION_EXPIRED: _S.PERMISSION_DENIED,
    Code.AUTHORIZATION_REVOKED: _S.PERMISSION_DENIED,
    Code.NOT_FOUND: _S.NOT_FOUND,
    Code.DIGEST_CONFLICT: _S.ALREADY_EXISTS,
    Code.ILLEGAL_TRANSITION: _S.FAILED_PRECONDITION,
    Code.ALREADY_TERMINAL: _S.FAILED_PRECONDITION,
    Code.GATE_FAILED: _S.PERMISSION_DENIED,
    Code.MUTATION_OUTCOME_UNKNOWN: _S.UNAVAILABLE,
    Code.STALE_PAGE: _S.FAILED_PRECONDITION,
    Code.RESULT_TOO_LARGE: _S.OUT_OF_RANGE,
    Code.PROJECTION_OVERSIZED: _S.OUT_OF_RANGE,
    Code.RATE_LIMITED: _S.RESOURCE_EXHAUSTED,
    Code.DEADLINE_EXCEEDED: _S.DEADLINE_EXCEEDED,
    Code.CANCELLED: _S.CANCELLED,
    Code.STORE_UNAVAILABLE: _S.UNAVAILABLE,
    Code.FENCE_LOST: _S.ABORTED,
    Code.CURSOR_GAP: _S.ABORTED,
    Code.POLICY_UNAVAILABLE: _S.UNAVAILABLE,
    Code.POLICY_STALE: _S.ABORTED,
    Code.PROJECTION_STALE: _S.UNAVAILABLE,
    Code.RANKING_UNAVAILABLE: _S.UNAVAILABLE,
    Code.CAPABILITY_UNAVAILABLE: _S.UNIMPLEMENTED,
    Code.JOURNAL_CORRUPT: _S.DATA_LOSS,
    Code.BLOB_MISSING: _S.DATA_LOSS,
    Code.REGISTRY_VERSION_UNAVAILABLE: _S.FAILED_PRECONDITION,
    Code.BACKUP_INVALID: _S.FAILED_PRECONDITION,
    Code.RESTORE_REFUSED: _S.FAILED_PRECONDITION,
    Code.MIGRATION_LEDGER_INVALID: _S.FAILED_PRECONDITION,
}

# A status without an engram code (transport failure, foreign server) maps to these.
_FALLBACK: dict[grpc.StatusCode, Code] = {
    _S.DEADLINE_EXCEEDED: Code.DEADLINE_EXCEEDED,
    _S.CANCELLED: Code.CANCELLED,
    _S.RESOURCE_EXHAUSTED: Code.RATE_LIMITED,
}

_BY_NAME = {code.value: code for code in Code}

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


# Exception types that mean a dependency did not answer (registered by the service that has
# one, e.g. storage: PyMongo's ConnectionFailure → its MongoDB Dependency): answered
# STORE_UNAVAILABLE without a traceback per call; the Dependency logs the outage once.
_UNREACHABLE: dict[type[BaseException], Callable[[], None]] = {}


def on_unreachable(exc_type: type[BaseException], report: Callable[[], None]) -> None:
    """Treat ``exc_type`` raised by a servicer as its dependency being away: call ``report``."""
    _UNREACHABLE[exc_type] = report


def rpc_boundary(method: F) -> F:
    """Decorate an async servicer method: EngramError → status + code; a registered
    unreachable-dependency error (:func:`on_unreachable`) is reported and answered
    STORE_UNAVAILABLE; anything else is logged server-side and answered STORE_UNAVAILABLE with
    the constant message."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except EngramError as exc:
            await _abort(context, exc)
        except grpc.aio.AioRpcError as exc:
            await _abort(context, error_from_rpc(exc))
        except Exception as exc:  # noqa: BLE001 - the boundary: log detail, answer constant
            if _is_abort(context):
                raise
            report = next((r for t, r in _UNREACHABLE.items() if isinstance(exc, t)), None)
            if report is not None:
                report()
            else:
                log.exception("unexpected error in %s", method.__name__)
            await _abort(context, EngramError(Code.STORE_UNAVAILABLE))

    return wrapper  # type: ignore[return-value]


def _is_abort(context: grpc.aio.ServicerContext) -> bool:
    code = context.code() if hasattr(context, "code") else None
    return code not in (None, grpc.StatusCode.OK)


async def _abort(context: grpc.aio.ServicerContext, exc: EngramError) -> None:
    await context.abort(
        STATUS_FOR[exc.code], exc.message, trailing_metadata=((ERROR_CODE_KEY, exc.code.value),)
    )


def error_from_rpc(exc: grpc.aio.AioRpcError | grpc.RpcError) -> EngramError:
    """The contract error an RPC failure stands for."""
    metadata = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in metadata or ():
        if key == ERROR_CODE_KEY and value in _BY_NAME:
            return EngramError(_BY_NAME[value])
    status = exc.code() if hasattr(exc, "code") else None
    return EngramError(_FALLBACK.get(status, Code.STORE_UNAVAILABLE))
