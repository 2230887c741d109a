"""Storage re-checks the authority it is asked to act on (the internal plane's second wall).

The gateway forwards the host's own signed statements in the ``Caller``: the invocation
context and, where the call needs one, the confirmation. Before a capture, withdraw, forget,
get or admission request, storage verifies them itself against the host registry:

- the context: the host's signature and every claim (as the gateway does, with the same
  verifier; no replay guard here — the gateway spends the context's jti — and a grace of
  :data:`IN_FLIGHT_GRACE_SECONDS` for the call in flight), the tenant it may act for, the
  caller fields equal to the context's (scope, principal, agent, session, audit id, purpose),
  the tool in the context's ``tools`` and granted by the scope's policy, memory enabled;
- the confirmation (withdraw and forget always; capture and request_admission when the scope
  requires one): signed by the context's host for this principal, tool and target, and its
  operation digest equal to the request's — which storage recomputes for withdraw and forget
  from the request itself, so nothing in the request can differ from what the human approved.
  Its jti is spent here too (``confirmations``, a MongoDB collection of jti digests with a TTL
  index), so a confirmation replayed to storage is refused although the gateway never saw the
  replay.

Refusals: a context that does not verify or does not match the call is ``UNAUTHORIZED``; a
confirmation that is missing or does not verify is ``GATE_FAILED`` (the code the gateway uses).
Each is logged with a fixed reason, never token content. The authorization digest bound into a
transition's receipt is computed here from the verified confirmation, never taken from the
request.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymongo.errors import DuplicateKeyError, PyMongoError

from engram_api.common.v1 import common_pb2
from engram_core.confirmation import ConfirmationGrant, ConfirmationVerifier
from engram_core.digests import digest, operation_digest
from engram_core.errors import Code, EngramError, ProtocolRefusal
from engram_core.host_context import (
    CLOCK_SKEW_SECONDS,
    ContextVerifier,
    InvocationContext,
    ReplayGuardUnavailable,
    jti_key,
)
from engram_core.hosts import HostRegistry
from engram_core.policy import ScopePolicy
from engram_core.schemas.tools import TOOLS
from storage_service.store import Store

log = logging.getLogger("engram.storage.authority")

# A call the gateway verified may reach storage a little later: its tokens are accepted this
# much past their expiry and execution window.
IN_FLIGHT_GRACE_SECONDS = CLOCK_SKEW_SECONDS
CAPTURE = "engram_memory_capture"
REQUEST_ADMISSION = "engram_memory_request_admission"
GET = "engram_memory_get"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"


class MongoJtiGuard:
    """Single-use jtis in MongoDB: one document per used jti digest, removed by a TTL index
    after the token could no longer verify anyway."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    async def claim(self, namespace: str, jti: str, ttl_seconds: int, *, host_id: str,
                    issued_at: float | None = None) -> bool:
        """``issued_at`` is not needed: the collection is durable (a write is acknowledged only
        once committed), so its memory never predates a token."""
        expires = datetime.datetime.fromtimestamp(self._clock() + ttl_seconds, datetime.timezone.utc)
        try:
            await self._store.confirmations.insert_one({"_id": jti_key(namespace, host_id, jti), "expires_at": expires})
        except DuplicateKeyError:
            return False
        except PyMongoError as exc:
            raise ReplayGuardUnavailable() from exc
        return True


@dataclass(frozen=True)
class Authorized:
    """What storage verified for one call."""

    context: InvocationContext
    confirmation: ConfirmationGrant | None

    def authorization_digest(self, tool: str) -> str:
        """The digest a transition receipt binds (approver and approval time of the human)."""
        grant = self.confirmation
        if grant is None:
            raise EngramError(Code.GATE_FAILED)
        return digest("authorization", {"tool": tool, "approver": grant.approver,
                                        "approved_at": int(grant.approved_at * 1000)})


def transition_digest(tool: str, target: str, idempotency_key: str, reason_ref: str) -> str:
    """The operation digest of a withdraw or forget with exactly these arguments."""
    field = TOOLS[tool].target_field
    assert field is not None
    return operation_digest(tool, {field: target, "idempotency_key": idempotency_key, "reason_ref": reason_ref})


class HostAuthority:
    def __init__(self, registry: HostRegistry, audience: str, store: Store,
                 clock: Callable[[], float] = time.time) -> None:
        self._contexts = ContextVerifier(registry, audience, None, clock=clock,
                                         expiry_grace_seconds=IN_FLIGHT_GRACE_SECONDS)
        self._confirmations = ConfirmationVerifier(registry, audience, MongoJtiGuard(store, clock), clock=clock,
                                                   grace_seconds=IN_FLIGHT_GRACE_SECONDS)

    async def check(self, caller: common_pb2.Caller, tool: str, policy: ScopePolicy, *,
                    target: str = "", operation_digest: str = "") -> Authorized:
        """Verify the caller's host context for ``tool`` in a scope with ``policy``, and the
        confirmation where one is needed for ``target`` and ``operation_digest``."""
        ctx = await self._context(caller, tool)
        if tool not in policy.tools_for(ctx.principal, ctx.agent_id):
            self._refuse("tool_not_granted")
        spec = TOOLS[tool]
        if not (spec.confirmation_always or tool in policy.confirmation_required):
            return Authorized(ctx, None)
        if not caller.confirmation_token:
            log.info("storage refused: confirmation missing")
            raise EngramError(Code.GATE_FAILED)
        grant = await self._confirmations.verify(caller.confirmation_token, ctx=ctx, tool=tool, target=target,
                                                 expected_digest=operation_digest)
        return Authorized(ctx, grant)

    async def _context(self, caller: common_pb2.Caller, tool: str) -> InvocationContext:
        try:
            ctx = await self._contexts.verify(caller.context_token or None, None)
        except ProtocolRefusal:
            self._refuse("context")
        bound = (ctx.tenant, ctx.workspace, ctx.principal, ctx.agent_id, ctx.session, ctx.audit_id, ctx.purpose_ref)
        sent = (caller.scope.tenant, caller.scope.workspace, caller.principal, caller.agent_id, caller.session,
                caller.audit_id, caller.purpose_ref)
        if bound != sent:
            self._refuse("caller_mismatch")
        if tool not in ctx.tools:
            self._refuse("tool_not_in_context")
        return ctx

    @staticmethod
    def _refuse(reason: str) -> Any:
        log.warning("storage refused: %s", reason)
        raise EngramError(Code.UNAUTHORIZED)
