"""Celery tasks: decide admission, destroy keys, invalidate projections.

Tasks take ids only, are idempotent (storage refuses to apply an effect twice), run with
``acks_late`` and retry only on retriable contract codes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import grpc
from celery import Celery
from redis.exceptions import RedisError

from admission_worker.decide import Decision, decide, trust_class
from admission_worker.replicas import SearchReplicas
from admission_worker.screening import DEFAULT_BUDGET_SECONDS
from engram_api.search.v1 import search_pb2
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.errors import EngramError
from engram_core.grpc_errors import error_from_rpc
from engram_core.policy import PROJECTION_OBJECT_ID, ScopePolicy
from engram_core.taskq import DECIDE_ADMISSION, DECISION_FAILED, DESTROY_KEY, EXPIRE_RECORDS, INVALIDATE_PROJECTION
from engram_core.transport import ReloadingStub, Transport

log = logging.getLogger("engram.worker")

MAX_RETRIES = 8
# A decision task started this many times without its decision recorded (each start killed
# its worker, or failed for good: a poison candidate) is held for an operator on its next
# start instead of run again. A start is a delivery the worker begins (the caller's publish,
# a redelivery after a lost worker, the relay's re-publish), not Celery's retry of a
# transient error; a duplicate delivery of a decided request starts, finds the decision and
# returns it, so the count only matters while the decision is owed.
MAX_DECISION_STARTS = 5
STARTS_TTL_SECONDS = 86_400


class TransientTaskError(Exception):
    """A retriable contract error; Celery retries the task with back-off."""


@dataclass
class TaskClients:
    storage: ReloadingStub[storage_pb2_grpc.StorageServiceStub]
    search: SearchReplicas
    timeout: float

    @classmethod
    def connect(cls, transport: Transport, storage_addr: str, search_addr: str, timeout: float,
                search_replicas: str = "") -> "TaskClients":
        return cls(
            transport.stub(storage_pb2_grpc.StorageServiceStub, storage_addr, "storage", aio=False),
            SearchReplicas(search_replicas, search_addr, transport),
            timeout,
        )

    def call(self, method, request):  # type: ignore[no-untyped-def]
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            error = error_from_rpc(exc)
            if error.retriable:
                raise TransientTaskError(error.code.value) from None
            raise error from None


def _policy(policy_json: bytes) -> ScopePolicy | None:
    """The scope's policy as storage sent it; ``None`` when this worker cannot read it (a newer
    member during a rolling upgrade): the decision then holds the candidate for an operator."""
    try:
        return ScopePolicy.from_json(policy_json)
    except EngramError:
        return None


def _commit(clients: TaskClients, request_id: str, verdict: Decision) -> str:
    """Record ``verdict`` (once): the recorded outcome, the earlier one if there was one."""
    committed = clients.call(
        clients.storage.CommitDecision,
        storage_pb2.CommitDecisionRequest(
            request_id=request_id, decision=verdict.decision, reason=verdict.reason, trust=verdict.trust
        ),
    )
    return committed.outcome_json.decode("utf-8")


def hold_decision(clients: TaskClients, request_id: str) -> str:
    """Hold an undecidable request for an operator (``decision_failed``)."""
    return _commit(clients, request_id, Decision("pending_adjudication", DECISION_FAILED))


def run_decision(clients: TaskClients, request_id: str,
                 screening_budget_seconds: float = DEFAULT_BUDGET_SECONDS) -> str:
    """Decide one admission request (once: a decided request returns what was recorded).
    Returns the recorded outcome, canonical JSON of ids, cursor and digests (no content)."""
    opened = clients.call(clients.storage.OpenCandidate, storage_pb2.OpenCandidateRequest(request_id=request_id))
    if opened.outcome_json:
        return opened.outcome_json.decode("utf-8")
    try:
        payload, evidence, policy = json.loads(opened.payload_json), json.loads(opened.evidence_json), _policy(opened.policy_json)
        verdict = decide(
            payload, evidence, policy,
            duplicate_of_record_id=opened.duplicate_of_record_id,
            matches_forgotten=opened.matches_forgotten,
            screening_budget_seconds=screening_budget_seconds,
            trust=trust_class(payload, evidence, policy, tenant=opened.tenant, workspace=opened.workspace),
            tenant=opened.tenant, workspace=opened.workspace,
        )
    except Exception as exc:  # noqa: BLE001 - a poison candidate is held, not retried forever
        # The same candidate would fail the same way on every delivery: an operator decides it.
        log.error("decision failed, candidate held: %s", type(exc).__name__)
        verdict = Decision("pending_adjudication", DECISION_FAILED)
    return _commit(clients, request_id, verdict)


def run_destroy_key(clients: TaskClients, outbox_id: str) -> str:
    reply = clients.call(clients.storage.DestroyKey, storage_pb2.DestroyKeyRequest(outbox_id=outbox_id))
    return reply.key_destruction_receipt_digest


def run_invalidation(clients: TaskClients, outbox_id: str) -> str:
    item = clients.call(clients.storage.GetOutboxItem, storage_pb2.GetOutboxItemRequest(outbox_id=outbox_id))
    if item.state == "done":
        return "already_done"
    try:
        targets = clients.search.targets()
    except OSError:
        raise TransientTaskError("STORE_UNAVAILABLE") from None  # a replica name did not resolve
    surfaces: set[str] = set()
    replicas: set[str] = set()
    # The object ``projection`` is the operator's rebuild: the scope's whole projection.
    whole_scope = item.object_id == PROJECTION_OBJECT_ID
    request = search_pb2.InvalidateRequest(scope=item.scope, record_id="" if whole_scope else item.object_id,
                                           whole_scope=whole_scope)
    for target in targets:
        # Every replica, or the task fails (and is retried): coverage is never partial.
        removed = clients.call(clients.search.stub(target).Invalidate, request)
        surfaces.update(removed.surfaces)
        replicas.add(removed.replica_id or target)
    reply = clients.call(
        clients.storage.RecordCoverage,
        storage_pb2.RecordCoverageRequest(outbox_id=outbox_id, surfaces=sorted(surfaces), replicas=sorted(replicas)),
    )
    return reply.coverage_receipt_digest


# Sweep calls per task run (each up to SWEEP_BATCH records); a backlog larger than that is
# finished by the next scheduled run.
SWEEP_BATCH = 500
MAX_SWEEP_CALLS = 20


def run_expiry(clients: TaskClients) -> str:
    """Expire what is due, batch by batch, until storage says nothing more is: the count."""
    expired = 0
    for _ in range(MAX_SWEEP_CALLS):
        swept = clients.call(clients.storage.SweepExpired, storage_pb2.SweepExpiredRequest(limit=SWEEP_BATCH))
        expired += swept.expired
        if not swept.more:
            break
    return str(expired)


def register_tasks(app: Celery, clients: TaskClients,
                   screening_budget_seconds: float = DEFAULT_BUDGET_SECONDS) -> None:
    """Bind the four tasks to ``app`` with ``clients``."""
    retry = {
        "bind": True,
        "acks_late": True,
        "autoretry_for": (TransientTaskError,),
        "retry_backoff": 0.2,
        "retry_backoff_max": 10,
        "retry_jitter": True,
        "max_retries": MAX_RETRIES,
    }

    @app.task(name=DECIDE_ADMISSION, **retry)
    def decide_admission(self, request_id: str) -> str:  # type: ignore[no-untyped-def]
        if _starts(self) > MAX_DECISION_STARTS:
            log.error("decision task started %d times undecided, candidate held", MAX_DECISION_STARTS,
                      extra={"task_id": self.request.id})
            return _logged(self, "hold", lambda: hold_decision(clients, request_id))
        return _logged(self, "decide", lambda: run_decision(clients, request_id, screening_budget_seconds))

    @app.task(name=DESTROY_KEY, **retry)
    def destroy_key(self, outbox_id: str) -> str:  # type: ignore[no-untyped-def]
        return _logged(self, "destroy_key", lambda: run_destroy_key(clients, outbox_id))

    @app.task(name=EXPIRE_RECORDS, **{**retry, "max_retries": 3})
    def expire_records(self) -> str:  # type: ignore[no-untyped-def]
        # Idempotent and re-run on schedule: a few retries, then the next run takes over.
        return _logged(self, "expire", lambda: run_expiry(clients))

    @app.task(name=INVALIDATE_PROJECTION, **retry)
    def invalidate_projection(self, outbox_id: str) -> str:  # type: ignore[no-untyped-def]
        return _logged(self, "invalidate", lambda: run_invalidation(clients, outbox_id))


def _starts(task) -> int:  # type: ignore[no-untyped-def]
    """How many times this task id has started, this start included (0: not counted). The
    counter is a Redis key beside the task's result key: a task id, never content."""
    if task.request.retries:
        return 0
    key = task.backend.get_key_for_task(task.request.id) + b".starts"
    try:
        pipe = task.backend.client.pipeline()
        pipe.incr(key)
        pipe.expire(key, STARTS_TTL_SECONDS)
        count, _ = pipe.execute()
    except RedisError:
        return 0  # unknown: run it (a broker that is down delivers nothing anyway)
    return int(count)


def _logged(task, what: str, run) -> str:  # type: ignore[no-untyped-def]
    try:
        result = run()
    except EngramError as exc:
        # Permanent: recorded, not retried. The id and code only.
        log.error("task %s failed: %s", what, exc.code.value, extra={"task_id": task.request.id})
        raise
    log.info("task %s done", what, extra={"task_id": task.request.id})
    return str(result)
