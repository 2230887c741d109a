"""AdminService: the operator interface (SPEC §12), served by the storage process and never
reachable through MCP. Every call must carry ``authorization: Bearer <operator token>``;
anything else is refused with UNAUTHENTICATED before any work."""

from __future__ import annotations

import hmac
import json
from typing import Any

import grpc

from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import rpc_boundary
from storage_service import journal
from storage_service.admission import Admissions
from storage_service.operator import OperatorMoves, check_ref
from engram_core.policy import PROJECTION_OBJECT_ID, ScopePolicy
from storage_service.policy import POLICY_OBJECT_ID, Policies, PolicyChange
from storage_service.store import Store
from storage_service.service import scope_of

UNAUTHENTICATED_MESSAGE = "Operator credential required."
DEFAULT_ACTOR = "operator"


def _edit(request: admin_pb2.EnableScopeRequest | admin_pb2.DisableScopeRequest
          | admin_pb2.UpdatePolicyRequest) -> dict[str, Any]:
    """The compare-and-set version and the actor of a policy edit."""
    return {
        "expected_version": request.expected_version if request.HasField("expected_version") else None,
        "actor": check_ref(request.actor_ref) if request.actor_ref else DEFAULT_ACTOR,
    }


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, store: Store, policies: Policies, token: str, moves: OperatorMoves,
                 admissions: Admissions) -> None:
        self._store = store
        self._policies = policies
        self._moves = moves
        self._admissions = admissions
        self._expected = f"Bearer {token}".encode("utf-8")

    async def _authenticate(self, context: grpc.aio.ServicerContext) -> None:
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode("utf-8"), self._expected):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)

    @staticmethod
    def _state(scope: common_pb2.Scope, policy: ScopePolicy,
               change: PolicyChange | None = None) -> admin_pb2.ScopeState:
        return admin_pb2.ScopeState(scope=scope, enabled=policy.enabled, policy_json=canonicalize(policy.wire()),
                                    version=policy.version, change_cursor=change.cursor if change else 0,
                                    changed_members=change.members if change else ())

    @rpc_boundary
    async def EnableScope(self, request: admin_pb2.EnableScopeRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        change = await self._policies.enable(scope_of(request.scope), list(request.tools),
                                             list(request.confirmation_required), request.language,
                                             **_edit(request))
        return self._state(request.scope, change.policy, change)

    @rpc_boundary
    async def DisableScope(self, request: admin_pb2.DisableScopeRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        change = await self._policies.disable(scope_of(request.scope), **_edit(request))
        return self._state(request.scope, change.policy, change)

    @rpc_boundary
    async def UpdatePolicy(self, request: admin_pb2.UpdatePolicyRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        try:
            changes = json.loads(request.changes_json)
        except (UnicodeDecodeError, ValueError):
            raise EngramError(Code.INVALID_SCHEMA) from None
        change = await self._policies.update(scope_of(request.scope), changes, **_edit(request))
        return self._state(request.scope, change.policy, change)

    @rpc_boundary
    async def GetScope(self, request: admin_pb2.GetScopeRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        return self._state(request.scope, await self._policies.get(scope_of(request.scope)))

    @rpc_boundary
    async def TransitionRecord(self, request: admin_pb2.TransitionRecordRequest,
                               context: grpc.aio.ServicerContext) -> admin_pb2.TransitionRecordResponse:
        await self._authenticate(context)
        answer = await self._moves.move(scope_of(request.scope), request.record_id, request.operation,
                                        request.reason_ref, to_state=request.to_state,
                                        related_id=request.related_record_id)
        return admin_pb2.TransitionRecordResponse(value_json=canonicalize(answer))

    @rpc_boundary
    async def RebuildProjection(self, request: admin_pb2.RebuildProjectionRequest,
                                context: grpc.aio.ServicerContext) -> admin_pb2.JsonResponse:
        await self._authenticate(context)
        answer = await self._moves.rebuild_projection(scope_of(request.scope), request.reason_ref,
                                                      request.wait_seconds)
        return admin_pb2.JsonResponse(value_json=canonicalize(answer))

    @rpc_boundary
    async def ListPending(self, request: admin_pb2.ListPendingRequest,
                          context: grpc.aio.ServicerContext) -> admin_pb2.ListPendingResponse:
        await self._authenticate(context)
        found = await self._admissions.pending(scope_of(request.scope), request.limit or 100,
                                               request.after_candidate_id)
        return admin_pb2.ListPendingResponse(candidates_json=canonicalize(found))

    @rpc_boundary
    async def Adjudicate(self, request: admin_pb2.AdjudicateRequest,
                         context: grpc.aio.ServicerContext) -> admin_pb2.AdjudicateResponse:
        await self._authenticate(context)
        check_ref(request.reason_ref)
        outcome = await self._admissions.adjudicate(scope_of(request.scope), request.candidate_id, request.decision,
                                                    request.reason_ref)
        return admin_pb2.AdjudicateResponse(outcome_json=outcome)

    @rpc_boundary
    async def RevealCandidate(self, request: admin_pb2.RevealCandidateRequest,
                              context: grpc.aio.ServicerContext) -> admin_pb2.JsonResponse:
        await self._authenticate(context)
        check_ref(request.reason_ref)
        revealed = await self._admissions.reveal(scope_of(request.scope), request.candidate_id, request.reason_ref)
        return admin_pb2.JsonResponse(value_json=canonicalize(revealed))

    @rpc_boundary
    async def ObjectHistory(self, request: admin_pb2.ObjectHistoryRequest,
                            context: grpc.aio.ServicerContext) -> admin_pb2.JsonResponse:
        await self._authenticate(context)
        scope = scope_of(request.scope)
        store = self._store
        if not request.object_id:
            raise EngramError(Code.INVALID_SCHEMA)
        if request.object_id == POLICY_OBJECT_ID:
            # The scope policy's changes: who changed which members, version by version.
            policy = await self._policies.get(scope)
            events = await journal.history(store, scope, [POLICY_OBJECT_ID])
            return admin_pb2.JsonResponse(value_json=canonicalize({
                "object_id": POLICY_OBJECT_ID, "state": f"version {policy.version}", "events": events}))
        if request.object_id == PROJECTION_OBJECT_ID:
            # The operator's rebuilds of the scope's search projection.
            events = await journal.history(store, scope, [PROJECTION_OBJECT_ID])
            return admin_pb2.JsonResponse(value_json=canonicalize({
                "object_id": PROJECTION_OBJECT_ID, "state": f"rebuilt {len(events)} times", "events": events}))
        record = await store.records.find_one({"_id": request.object_id, "scope": scope.key},
                                              {"state": 1, "candidate_id": 1})
        candidate = await store.candidates.find_one({"_id": request.object_id, "scope": scope.key}, {"state": 1})
        if record is None and candidate is None:
            raise EngramError(Code.NOT_FOUND)
        ids = [request.object_id] + ([record["candidate_id"]] if record is not None else [])
        events = await journal.history(store, scope, ids)
        state = (record or candidate or {})["state"]
        return admin_pb2.JsonResponse(value_json=canonicalize({"object_id": request.object_id, "state": state,
                                                               "events": events}))

    @rpc_boundary
    async def VerifyJournal(self, request: admin_pb2.VerifyJournalRequest,
                            context: grpc.aio.ServicerContext) -> admin_pb2.JsonResponse:
        await self._authenticate(context)
        result = await journal.verify(self._store, scope_of(request.scope))
        return admin_pb2.JsonResponse(value_json=canonicalize({
            "ok": result.ok, "events": result.events, "head": result.head,
            **({"first_bad_cursor": result.first_bad_cursor, "problem": result.problem} if not result.ok else {})}))
