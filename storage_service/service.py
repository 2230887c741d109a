"""StorageService: protobuf ↔ the storage operations. No logic beyond decoding and encoding;
every method is behind :func:`rpc_boundary` (one error mapping)."""

from __future__ import annotations

import json
import re
from typing import Any

import grpc

from engram_api.common.v1 import common_pb2
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.digests import is_digest, with_digest
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import rpc_boundary
from engram_core.timefmt import format_instant, now_ms
from storage_service import outbox
from engram_core.ids import candidate_id_from_digest
from storage_service.admission import Admissions
from storage_service.authority import CAPTURE, FORGET, GET, REQUEST_ADMISSION, WITHDRAW, transition_digest
from storage_service.deps import Deps
from storage_service.ledger import GateKey
from storage_service.mutations import Mutations
from storage_service.reads import Reads
from storage_service.store import Scope
from storage_service.sweeper import MAX_SWEEP, Sweeper
from storage_service.vectors import RecordVectors, VectorItem

_CURSOR_RE = re.compile(r"^(0|[1-9][0-9]{0,18})\Z")
SURFACE_RE = re.compile(r"^[a-z_]{1,64}\Z")
# A search replica's id: a host name or address and a port (no spaces, no control characters).
REPLICA_RE = re.compile(r"^[A-Za-z0-9._:\[\]-]{1,128}\Z")
MAX_REPLICAS = 256


def scope_of(message: common_pb2.Scope) -> Scope:
    if not message.tenant or not message.workspace:
        raise EngramError(Code.INVALID_SCHEMA)
    return Scope(message.tenant, message.workspace)


def gate_key(caller: common_pb2.Caller, idempotency_key: str, operation_digest: str) -> GateKey:
    if not caller.principal or not idempotency_key:
        raise EngramError(Code.INVALID_SCHEMA)
    if not is_digest(operation_digest):
        raise EngramError(Code.INVALID_DIGEST)
    return GateKey(scope_of(caller.scope), caller.principal, idempotency_key, operation_digest)


def parse_cursor(text: str) -> int:
    if not _CURSOR_RE.match(text or "0"):
        raise EngramError(Code.INVALID_SCHEMA)
    return int(text or "0")


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise EngramError(Code.INVALID_SCHEMA) from None


class StorageServicer(storage_pb2_grpc.StorageServiceServicer):
    def __init__(self, deps: Deps) -> None:
        self._d = deps
        self._mutations = Mutations(deps)
        self._admissions = Admissions(deps)
        self._reads = Reads(deps)
        self._vectors = RecordVectors(deps)
        self._sweeper = Sweeper(deps)

    @rpc_boundary
    async def Capture(self, request: storage_pb2.CaptureRequest, context: grpc.aio.ServicerContext) -> storage_pb2.MutationResponse:
        key = gate_key(request.caller, request.idempotency_key, request.operation_digest)
        policy = await self._d.policies.get(key.scope)
        await self._d.authority.check(request.caller, CAPTURE, policy, target=candidate_id_from_digest(key.identity),
                                      operation_digest=request.operation_digest)
        done = await self._mutations.capture(key, _json(request.payload_json), _json(request.evidence_json), policy)
        return storage_pb2.MutationResponse(value_json=canonicalize(done.value), replayed=done.replayed)

    async def _transition_authority(self, request: storage_pb2.TransitionRequest, tool: str) -> tuple[GateKey, str]:
        """The gate key and the authorization digest of a withdraw or forget the host's
        confirmation approves exactly (the request's operation digest recomputed from it)."""
        key = gate_key(request.caller, request.idempotency_key, request.operation_digest)
        expected = transition_digest(tool, request.target, request.idempotency_key, request.reason_ref)
        if request.operation_digest != expected:
            raise EngramError(Code.INVALID_DIGEST)
        policy = await self._d.policies.get(key.scope)
        authorized = await self._d.authority.check(request.caller, tool, policy, target=request.target,
                                                   operation_digest=expected)
        return key, authorized.authorization_digest(tool)

    @rpc_boundary
    async def Withdraw(self, request: storage_pb2.TransitionRequest, context: grpc.aio.ServicerContext) -> storage_pb2.MutationResponse:
        key, authorization = await self._transition_authority(request, WITHDRAW)
        done = await self._mutations.withdraw(key, request.target, request.reason_ref, authorization)
        return storage_pb2.MutationResponse(value_json=canonicalize(done.value), replayed=done.replayed)

    @rpc_boundary
    async def Forget(self, request: storage_pb2.TransitionRequest, context: grpc.aio.ServicerContext) -> storage_pb2.MutationResponse:
        key, authorization = await self._transition_authority(request, FORGET)
        done = await self._mutations.forget(key, request.target, request.reason_ref, authorization)
        return storage_pb2.MutationResponse(value_json=canonicalize(done.value), replayed=done.replayed)

    @rpc_boundary
    async def GetRecord(self, request: storage_pb2.GetRecordRequest, context: grpc.aio.ServicerContext) -> storage_pb2.GetRecordResponse:
        scope = scope_of(request.caller.scope)
        policy, head = await self._d.policies.with_head(scope)  # one read: the policy to authorize, the head
        await self._d.authority.check(request.caller, GET, policy)
        read = await self._reads.get(scope, request.record_id, head)
        return storage_pb2.GetRecordResponse(
            record_json=canonicalize(read.record),
            record_digest=read.record["record_digest"],
            valid_as_of_ms=read.valid_as_of_ms,
            system_as_of=str(read.head_cursor),
            validated_through_cursor=str(read.head_cursor),
        )

    @rpc_boundary
    async def GetScopePolicy(self, request: storage_pb2.GetScopePolicyRequest, context: grpc.aio.ServicerContext) -> storage_pb2.ScopePolicyResponse:
        scope = scope_of(request.scope)
        if not request.with_head_cursor:
            return storage_pb2.ScopePolicyResponse(policy_json=canonicalize((await self._d.policies.get(scope)).wire()))
        policy, head = await self._d.policies.with_head(scope)
        return storage_pb2.ScopePolicyResponse(policy_json=canonicalize(policy.wire()), head_cursor=str(head))

    @rpc_boundary
    async def BeginAdmission(self, request: storage_pb2.BeginAdmissionRequest, context: grpc.aio.ServicerContext) -> storage_pb2.BeginAdmissionResponse:
        key = gate_key(request.caller, request.idempotency_key, request.operation_digest)
        await self._d.authority.check(request.caller, REQUEST_ADMISSION, await self._d.policies.get(key.scope),
                                      target=request.candidate_id, operation_digest=request.operation_digest)
        begun = await self._admissions.begin(key, request.candidate_id)
        return storage_pb2.BeginAdmissionResponse(outcome_json=begun.outcome_json, request_id=begun.request_id,
                                                  fresh=begun.fresh)

    @rpc_boundary
    async def OpenCandidate(self, request: storage_pb2.OpenCandidateRequest, context: grpc.aio.ServicerContext) -> storage_pb2.OpenCandidateResponse:
        opened = await self._admissions.open(request.request_id)
        if opened.outcome_json:
            return storage_pb2.OpenCandidateResponse(outcome_json=opened.outcome_json)
        return storage_pb2.OpenCandidateResponse(
            payload_json=canonicalize(opened.payload),
            evidence_json=canonicalize(opened.evidence),
            policy_json=canonicalize(opened.policy.wire()),
            duplicate_of_record_id=opened.duplicate_of_record_id,
            matches_forgotten=opened.matches_forgotten,
            tenant=opened.scope.tenant if opened.scope else "",
            workspace=opened.scope.workspace if opened.scope else "",
        )

    @rpc_boundary
    async def CommitDecision(self, request: storage_pb2.CommitDecisionRequest, context: grpc.aio.ServicerContext) -> storage_pb2.CommitDecisionResponse:
        outcome = await self._admissions.commit(request.request_id, request.decision, request.reason, request.trust)
        return storage_pb2.CommitDecisionResponse(outcome_json=outcome)

    @rpc_boundary
    async def ReadJournal(self, request: storage_pb2.ReadJournalRequest, context: grpc.aio.ServicerContext) -> storage_pb2.ReadJournalResponse:
        events, head = await self._reads.journal(scope_of(request.scope), parse_cursor(request.after_cursor), request.limit)
        return storage_pb2.ReadJournalResponse(
            events=[
                storage_pb2.JournalEvent(
                    cursor=str(e["cursor"]), operation=e["operation"], object_id=e["object_id"],
                    from_state=e["from_state"], to_state=e["to_state"], event_digest=e["event_digest"],
                )
                for e in events
            ],
            head_cursor=str(head),
        )

    @rpc_boundary
    async def SweepExpired(self, request: storage_pb2.SweepExpiredRequest,
                           context: grpc.aio.ServicerContext) -> storage_pb2.SweepExpiredResponse:
        swept = await self._sweeper.sweep(request.limit or MAX_SWEEP)
        return storage_pb2.SweepExpiredResponse(expired=swept.expired, skipped=swept.skipped, more=swept.more)

    @rpc_boundary
    async def FetchRecords(self, request: storage_pb2.FetchRecordsRequest, context: grpc.aio.ServicerContext) -> storage_pb2.FetchRecordsResponse:
        found = await self._reads.fetch(scope_of(request.scope), list(request.record_ids),
                                        vector_model=request.vector_model)
        return storage_pb2.FetchRecordsResponse(
            records=[storage_pb2.IndexableRecord(record_id=rid, state=state, record_json=body, vectors=vectors)
                     for rid, state, body, vectors in found.records],
            deferred_ids=found.deferred,
        )

    @rpc_boundary
    async def StoreVectors(self, request: storage_pb2.StoreVectorsRequest, context: grpc.aio.ServicerContext) -> storage_pb2.StoreVectorsResponse:
        items = [VectorItem(item.record_id, item.vectors) for item in request.items]
        stored = await self._vectors.store(scope_of(request.scope), request.vector_model, items)
        return storage_pb2.StoreVectorsResponse(stored=stored)

    async def _outbox_row(self, outbox_id: str) -> dict[str, Any]:
        row = await outbox.get(self._d.store, outbox_id)
        if row is None:
            raise EngramError(Code.NOT_FOUND)
        return row

    @rpc_boundary
    async def DestroyKey(self, request: storage_pb2.DestroyKeyRequest, context: grpc.aio.ServicerContext) -> storage_pb2.DestroyKeyResponse:
        row = await self._outbox_row(request.outbox_id)
        receipt = await self._d.vault.destroy(row["object_id"], row["scope"])
        await outbox.complete(self._d.store, row["_id"], key_destruction_receipt_digest=receipt)
        return storage_pb2.DestroyKeyResponse(key_destruction_receipt_digest=receipt)

    @rpc_boundary
    async def RecordCoverage(self, request: storage_pb2.RecordCoverageRequest, context: grpc.aio.ServicerContext) -> storage_pb2.RecordCoverageResponse:
        row = await self._outbox_row(request.outbox_id)
        if row.get("coverage_receipt_digest"):
            return storage_pb2.RecordCoverageResponse(coverage_receipt_digest=row["coverage_receipt_digest"])
        surfaces = sorted(set(request.surfaces))
        replicas = sorted(set(request.replicas))
        if not surfaces or not all(SURFACE_RE.match(s) for s in surfaces):
            raise EngramError(Code.INVALID_SCHEMA)
        if not replicas or len(replicas) > MAX_REPLICAS or not all(REPLICA_RE.match(r) for r in replicas):
            raise EngramError(Code.INVALID_SCHEMA)
        receipt = coverage_receipt(row, surfaces, replicas)
        await outbox.complete(self._d.store, row["_id"], coverage_receipt_digest=receipt["receipt_digest"],
                              surfaces=surfaces, replicas=replicas, coverage_receipt=receipt)
        digest_value = receipt["receipt_digest"]
        return storage_pb2.RecordCoverageResponse(coverage_receipt_digest=digest_value)

    @rpc_boundary
    async def GetOutboxItem(self, request: storage_pb2.GetOutboxItemRequest, context: grpc.aio.ServicerContext) -> storage_pb2.OutboxItem:
        row = await self._outbox_row(request.outbox_id)
        return storage_pb2.OutboxItem(
            outbox_id=row["_id"], task=row["task"],
            scope=common_pb2.Scope(tenant=row["tenant"], workspace=row["workspace"]),
            object_id=row["object_id"], state=row["state"],
        )


def coverage_receipt(row: dict[str, Any], surfaces: list[str], replicas: list[str]) -> dict[str, Any]:
    """The coverage receipt of a forgotten record: which surfaces of which search replicas
    confirmed its removal."""
    return with_digest(
        "coverage",
        {"record_id": row["object_id"], "scope_digest": row["scope"], "surfaces": surfaces, "replicas": replicas,
         "completed_at": format_instant(now_ms())},
        "receipt_digest",
    )
