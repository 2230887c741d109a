"""The gateway's one request path: verify the host context, decide visibility, validate,
bind purpose, check the confirmation, forward to the owning service, wrap the envelope.

Protocol refusals (-32603 / -32602) are raised as :class:`ProtocolRefusal`; every other
outcome of ``tools/call`` is an envelope (SPEC §4).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio.lowlevel

from engram_api.admission.v1 import admission_pb2
from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2
from engram_api.storage.v1 import storage_pb2
from engram_core import envelope
from engram_core.canonical import canonicalize
from engram_core.digests import capture_identity_digest, operation_digest, scope_digest
from engram_core.errors import Code, EngramError, ProtocolRefusal
from engram_core.ids import candidate_id_from_digest
from engram_core.policy import ScopePolicy
from engram_core.scope_changes import ScopeReadCache
from engram_core.schemas.tools import TOOL_NAMES, TOOLS
from engram_core.schemas.validate import validate_arguments, with_defaults
from engram_core.timefmt import now_ms
from gateway.backends import ADMISSION, SEARCH, STORAGE, Backends, caller_message
from engram_core.confirmation import ConfirmationGrant, ConfirmationVerifier
from engram_core.host_context import ContextUnverifiable, ContextVerifier, InvocationContext
from gateway.reads import build_get_value

CONTEXT_META_KEY = "io.engram/context"
CONFIRMATION_META_KEY = "io.engram/confirmation"
CONTEXT_HEADER = "engram-context"

log = logging.getLogger("engram.gateway")

def _log_cancelled(tool: str, ctx: InvocationContext) -> None:
    log.info("call cancelled", extra={"tool": tool, "scope_digest": scope_digest(ctx.tenant, ctx.workspace)})


@dataclass(frozen=True)
class PolicyRead:
    """The scope's policy as storage answered it: read from storage, or reused while the scope's
    change stamp holds (:mod:`engram_core.scope_changes`); either way an operator's change takes
    effect on the next call."""

    policy: ScopePolicy
    # As storage sent them: forwarded with a search so the search service reads neither again.
    policy_json: bytes = b""
    head_cursor: str = ""

    @classmethod
    def from_json(cls, data: bytes, head_cursor: str = "") -> "PolicyRead":
        return cls(ScopePolicy.from_json(data), data, head_cursor)

    def visible(self, ctx: InvocationContext) -> frozenset[str]:
        """Host opt-in ∩ the operator's grant to this principal or agent (nothing while off)."""
        return ctx.tools & self.policy.tools_for(ctx.principal, ctx.agent_id)


def _token(meta: Mapping[str, Any] | None, key: str) -> str | None:
    if not meta or key not in meta:
        return None
    value = meta[key]
    if not isinstance(value, str):
        raise ProtocolRefusal.untrusted()
    return value


class Dispatcher:
    """Serves tools/list and tools/call for both transports."""

    def __init__(
        self,
        backends: Backends,
        contexts: ContextVerifier,
        confirmations: ConfirmationVerifier,
        max_call_seconds: float = 30.0,
        policies: ScopeReadCache[PolicyRead] | None = None,
    ) -> None:
        """``policies``: the scopes' policy and head reused while unchanged (None: read from
        storage on every call)."""
        self._backends = backends
        self._contexts = contexts
        self._confirmations = confirmations
        self._max_call_seconds = max_call_seconds
        self._policies = policies

    async def _verify(self, meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> InvocationContext:
        header_token = headers.get(CONTEXT_HEADER) if headers is not None else None
        return await self._contexts.verify(_token(meta, CONTEXT_META_KEY), header_token)

    async def _policy(self, ctx: InvocationContext, with_head: bool = False) -> PolicyRead:
        """``with_head``: also the journal head (a search forwards both to the search service,
        which then needs no storage round trip of its own when its projection is current).
        With the cache, the copy read under the scope's current change stamp, if any (the stamp
        is read first: a change after it moves it); else storage's answer, with the head."""
        cache = self._policies
        key = scope_digest(ctx.tenant, ctx.workspace) if cache is not None else ""
        stamp = await cache.stamp(key) if cache is not None else None
        if cache is not None and (held := cache.get(key, stamp)) is not None:
            return held
        request = storage_pb2.GetScopePolicyRequest(
            scope=common_pb2.Scope(tenant=ctx.tenant, workspace=ctx.workspace),
            with_head_cursor=with_head or cache is not None,
        )
        reply = await self._backends.call(STORAGE, "GetScopePolicy", request, self._timeout(ctx))
        read = PolicyRead.from_json(reply.policy_json, reply.head_cursor)
        if cache is not None:
            cache.put(key, stamp, read)
        return read

    async def visible_tools(self, ctx: InvocationContext) -> list[str]:
        """Host opt-in ∩ operator grants, and nothing when memory is off for the scope."""
        visible = (await self._policy(ctx)).visible(ctx)
        return [name for name in TOOL_NAMES if name in visible]

    async def list_tools(self, meta: Mapping[str, Any] | None, headers: Mapping[str, str] | None) -> list[str]:
        """No envelope exists for tools/list: a context that cannot be checked (replay store
        down) or an unknowable policy shows no tools."""
        try:
            ctx = await self._verify(meta, headers)
        except ContextUnverifiable:
            return []
        try:
            return await self.visible_tools(ctx)
        except EngramError:
            log.warning("policy unavailable for tools/list", extra={"scope_digest": scope_digest(ctx.tenant, ctx.workspace)})
            return []

    async def call_tool(
        self,
        name: str,
        arguments: Any,
        meta: Mapping[str, Any] | None,
        headers: Mapping[str, str] | None,
        interrupt: anyio.CancelScope | None = None,
    ) -> dict[str, Any]:
        """``interrupt``: the scope the peer's cancellation of this call cancels (over stdio, see
        gateway/cancellation.py); the verified part of the call runs in it, and an interrupted
        call answers ``CANCELLED``. Without one, a cancelled call raises its cancellation.
        Either way its downstream call is cancelled with it."""
        try:
            ctx = await self._verify(meta, headers)
        except ContextUnverifiable as exc:
            # Infrastructure, not trust: retriable, and nothing was served.
            return envelope.failure(EngramError(Code.STORE_UNAVAILABLE), exc.context.audit_id)
        if name not in TOOLS:
            raise ProtocolRefusal.unknown_tool()
        try:
            if interrupt is None:
                return await self._call_verified(name, arguments, ctx, meta)
            with interrupt:
                try:
                    # Cancelled while the context was verified: nothing is done.
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    return await self._call_verified(name, arguments, ctx, meta)
                except asyncio.CancelledError:
                    # grpc.aio answers a cancelled call with a bare CancelledError: inside the
                    # interrupted scope this raises the scope's own, which the scope absorbs.
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    raise
        except asyncio.CancelledError:
            # Anywhere after the context was verified (the policy read included).
            _log_cancelled(name, ctx)
            raise
        _log_cancelled(name, ctx)
        return envelope.failure(EngramError(Code.CANCELLED), ctx.audit_id)

    async def _call_verified(self, name: str, arguments: Any, ctx: InvocationContext,
                             meta: Mapping[str, Any] | None) -> dict[str, Any]:
        try:
            policy = await self._policy(ctx, with_head=name == "engram_memory_search")
        except EngramError as exc:
            # Storage could not be asked for the policy: the policy is what is missing.
            code = Code.POLICY_UNAVAILABLE if exc.code is Code.STORE_UNAVAILABLE else exc.code
            return envelope.failure(EngramError(code), ctx.audit_id)
        if name not in policy.visible(ctx):
            raise ProtocolRefusal.unknown_tool()
        try:
            value = await self._run(name, arguments if arguments is not None else {}, ctx, policy, meta)
        except EngramError as exc:
            return envelope.failure(exc, ctx.audit_id)
        except ProtocolRefusal:
            raise
        except Exception:  # noqa: BLE001 - the boundary: constant answer, detail in the log
            log.exception("unexpected error in %s", name)
            return envelope.failure(EngramError(Code.STORE_UNAVAILABLE), ctx.audit_id)
        return envelope.success(value, ctx.audit_id)

    def _timeout(self, ctx: InvocationContext, grant: ConfirmationGrant | None = None) -> float:
        deadline = ctx.deadline_ms if grant is None else min(ctx.deadline_ms, grant.execution_deadline_ms)
        remaining = (deadline - now_ms()) / 1000.0
        if remaining <= 0:
            raise EngramError(Code.DEADLINE_EXCEEDED)
        return min(remaining, self._max_call_seconds)

    async def _run(
        self,
        name: str,
        arguments: Any,
        ctx: InvocationContext,
        policy: PolicyRead,
        meta: Mapping[str, Any] | None,
    ) -> Any:
        tool = TOOLS[name]
        validate_arguments(name, arguments, now_ms=now_ms())
        self._bind_purpose(name, arguments, ctx)
        grant: ConfirmationGrant | None = None
        confirmation = ""
        if tool.confirmation_always or name in policy.policy.confirmation_required:
            token = _token(meta, CONFIRMATION_META_KEY)
            confirmation = token or ""
            grant = await self._confirmations.verify(
                token,
                ctx=ctx,
                tool=name,
                target=self._target(name, arguments, ctx),
                arguments=arguments,
            )
        timeout = self._timeout(ctx, grant)
        caller = caller_message(ctx, confirmation)
        if not tool.mutation:
            return await self._read(name, arguments, ctx, caller, policy, timeout)
        try:
            return await self._mutate(name, arguments, caller, grant, timeout)
        except EngramError as exc:
            if exc.code in (Code.DEADLINE_EXCEEDED, Code.CANCELLED, Code.STORE_UNAVAILABLE):
                # The operation may have happened: the client retries with the same key.
                raise EngramError(Code.MUTATION_OUTCOME_UNKNOWN) from None
            raise

    @staticmethod
    def _bind_purpose(name: str, arguments: dict[str, Any], ctx: InvocationContext) -> None:
        if name == "engram_memory_capture":
            purpose = arguments["payload"]["purpose_ref"]
        elif name in ("engram_memory_search", "engram_memory_get"):
            purpose = arguments["purpose_ref"]
        else:
            return
        if purpose != ctx.purpose_ref:
            raise ProtocolRefusal.untrusted()

    @staticmethod
    def _target(name: str, arguments: dict[str, Any], ctx: InvocationContext) -> str:
        """The object a confirmation names. A capture's target is the candidate it will create."""
        field = TOOLS[name].target_field
        if field is not None:
            return str(arguments[field])
        identity = capture_identity_digest(ctx.tenant, ctx.workspace, ctx.principal, arguments["idempotency_key"])
        return candidate_id_from_digest(identity)

    async def _read(
        self,
        name: str,
        arguments: dict[str, Any],
        ctx: InvocationContext,
        caller: common_pb2.Caller,
        policy: PolicyRead,
        timeout: float,
    ) -> Any:
        args = with_defaults(name, arguments)
        if name == "engram_memory_search":
            request = search_pb2.SearchRequest(caller=caller, arguments_json=canonicalize(args),
                                               policy_json=policy.policy_json, head_cursor=policy.head_cursor)
            reply = await self._backends.call(SEARCH, "Search", request, timeout)
            return envelope.ParsedValue.parse(reply.value_json)
        request = storage_pb2.GetRecordRequest(caller=caller, record_id=args["record_id"])
        reply = await self._backends.call(STORAGE, "GetRecord", request, timeout)
        return build_get_value(reply, ctx, policy.policy, args["max_packet_bytes"])

    async def _mutate(
        self,
        name: str,
        arguments: dict[str, Any],
        caller: common_pb2.Caller,
        grant: ConfirmationGrant | None,
        timeout: float,
    ) -> Any:
        op_digest = operation_digest(name, arguments)
        key = arguments["idempotency_key"]
        b = self._backends
        if name == "engram_memory_capture":
            request = storage_pb2.CaptureRequest(
                caller=caller,
                idempotency_key=key,
                operation_digest=op_digest,
                payload_json=canonicalize(arguments["payload"]),
                evidence_json=canonicalize(arguments["evidence"]),
            )
            reply = await b.call(STORAGE, "Capture", request, timeout)
            return envelope.ParsedValue.parse(reply.value_json)
        if name == "engram_memory_request_admission":
            request = admission_pb2.RequestAdmissionRequest(
                caller=caller,
                candidate_id=arguments["candidate_id"],
                idempotency_key=key,
                operation_digest=op_digest,
            )
            reply = await b.call(ADMISSION, "RequestAdmission", request, timeout)
            return envelope.ParsedValue.parse(reply.value_json)
        assert grant is not None
        transition = storage_pb2.TransitionRequest(
            caller=caller,
            idempotency_key=key,
            operation_digest=op_digest,
            target=arguments["candidate_id" if name == "engram_memory_withdraw" else "record_id"],
            reason_ref=arguments["reason_ref"],
        )
        method = "Withdraw" if name == "engram_memory_withdraw" else "Forget"
        reply = await b.call(STORAGE, method, transition, timeout)
        return envelope.ParsedValue.parse(reply.value_json)


