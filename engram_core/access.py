"""Least privilege on the internal plane: which service identity may call which gRPC method.

:data:`METHODS` is the whole table (full method name → identities). A method not in it is
refused to everyone; so is every call whose peer proved no identity. A refusal is
``PERMISSION_DENIED`` with the constant message :data:`DENIED_MESSAGE` and the contract code
``UNAUTHORIZED`` in the trailing metadata, logged with the method and the caller's identity
(never anything from the request). The interceptors are applied by the shared server factory
(:func:`engram_core.grpc_server.create_server`) and the worker's health server whenever the
transport is mutual TLS.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from engram_core.errors import Code
from engram_core.grpc_errors import ERROR_CODE_KEY
from engram_core.pki import IDENTITIES, identity_of

log = logging.getLogger("engram.access")

DENIED_MESSAGE = "Caller not permitted"

_STORAGE = "/engram.storage.v1.StorageService/"
_SEARCH = "/engram.search.v1.SearchService/"
_ADMISSION = "/engram.admission.v1.AdmissionService/"
_ADMIN = "/engram.admin.v1.AdminService/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"


# Each caller's job, and nothing else (docs/architecture.md shows the same table).
GRANTS: dict[str, tuple[str, ...]] = {
    # The agent-facing calls it forwards for a verified host context.
    "gateway": (*(_STORAGE + m for m in ("Capture", "Withdraw", "Forget", "GetRecord", "GetScopePolicy")),
                _SEARCH + "Search", _ADMISSION + "RequestAdmission"),
    # The journal and the records it projects, the vectors it embedded for them, and the scope
    # policy with its head cursor.
    "search": (_STORAGE + "ReadJournal", _STORAGE + "FetchRecords", _STORAGE + "StoreVectors",
               _STORAGE + "GetScopePolicy"),
    # Opening a candidate's admission request.
    "admission": (_STORAGE + "BeginAdmission",),
    # Deciding admission, key destruction, projection invalidation, the expiry sweep.
    "worker": (*(_STORAGE + m for m in ("OpenCandidate", "CommitDecision", "DestroyKey", "RecordCoverage",
                                        "GetOutboxItem", "SweepExpired")), _SEARCH + "Invalidate"),
    # The AdminService (which also wants the operator's bearer token).
    "operator": tuple(_ADMIN + m for m in ("EnableScope", "DisableScope", "GetScope", "UpdatePolicy",
                                           "TransitionRecord",
                                           "ListPending", "Adjudicate", "RevealCandidate", "ObjectHistory",
                                           "VerifyJournal", "RebuildProjection")),
    "storage": (),
}


def _by_method(grants: Mapping[str, tuple[str, ...]]) -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for identity, methods in grants.items():
        for method in methods:
            table.setdefault(method, set()).add(identity)
    # Health answers every identity of the plane (the gateway's readiness, engram up).
    table[HEALTH_CHECK] = set(IDENTITIES)
    return {method: frozenset(who) for method, who in table.items()}


METHODS: dict[str, frozenset[str]] = _by_method(GRANTS)


def permitted(method: str, identity: str | None, table: Mapping[str, frozenset[str]] = METHODS) -> bool:
    return identity is not None and identity in table.get(method, frozenset())


def _refusal_log(method: str, identity: str | None) -> None:
    log.warning("call refused: method %s, caller identity %s", method, identity or "none")


_TRAILER = ((ERROR_CODE_KEY, Code.UNAUTHORIZED.value),)


def _wrap(handler: grpc.RpcMethodHandler, check: Callable[[Any], Any], aio: bool) -> grpc.RpcMethodHandler:
    """``handler`` with ``check(context)`` run before its behaviour (unary-unary kept; a
    streaming method, which nothing in the table names, refuses before anything runs)."""
    if handler.unary_unary is not None:
        inner = handler.unary_unary
        if aio:
            async def unary_unary(request: Any, context: Any) -> Any:
                await check(context)
                return await inner(request, context)
        else:
            def unary_unary(request: Any, context: Any) -> Any:  # type: ignore[misc]
                check(context)
                return inner(request, context)
        return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)
    if aio:
        async def refuse(request: Any, context: Any) -> Any:
            await check(context)
    else:
        def refuse(request: Any, context: Any) -> Any:  # type: ignore[misc]
            check(context)
    return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=handler.request_deserializer,
                                               response_serializer=handler.response_serializer)


class AccessInterceptor(grpc.aio.ServerInterceptor):
    """The asyncio servers' access check (mutual TLS only: the peer's certificate names it)."""

    def __init__(self, table: Mapping[str, frozenset[str]] = METHODS) -> None:
        self._table = table

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method
        table = self._table

        async def check(context: grpc.aio.ServicerContext) -> None:
            identity = identity_of(dict(context.auth_context()))
            if not permitted(method, identity, table):
                _refusal_log(method, identity)
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, DENIED_MESSAGE, trailing_metadata=_TRAILER)

        return _wrap(handler, check, aio=True)


class SyncAccessInterceptor(grpc.ServerInterceptor):
    """The same check for a thread-pool server (the worker's health server)."""

    def __init__(self, table: Mapping[str, frozenset[str]] = METHODS) -> None:
        self._table = table

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        table = self._table

        def check(context: grpc.ServicerContext) -> None:
            identity = identity_of(dict(context.auth_context()))
            if not permitted(method, identity, table):
                _refusal_log(method, identity)
                context.set_trailing_metadata(_TRAILER)
                context.abort(grpc.StatusCode.PERMISSION_DENIED, DENIED_MESSAGE)

        return _wrap(handler, check, aio=False)
