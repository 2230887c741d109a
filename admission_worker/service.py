"""AdmissionService: register the request with storage, enqueue the decision task, wait for the
decision within the caller's deadline (SPEC §5 request_admission, §10)."""

from __future__ import annotations

import asyncio
import json
import logging

import grpc
import redis.asyncio as aioredis
from celery import Celery
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from engram_api.admission.v1 import admission_pb2, admission_pb2_grpc
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import error_from_rpc, rpc_boundary
from engram_core.taskq import DECIDE_ADMISSION, decision_task_id
from admission_worker.results import ResultListener, TaskFailed, forget_result

log = logging.getLogger("engram.admission")

# Time kept back from the caller's deadline to read the decision and answer.
ANSWER_MARGIN_SECONDS = 0.25


class AdmissionServicer(admission_pb2_grpc.AdmissionServiceServicer):
    def __init__(self, storage: storage_pb2_grpc.StorageServiceStub, celery: Celery, redis: aioredis.Redis,
                 results: ResultListener) -> None:
        self._storage = storage
        self._celery = celery
        self._redis = redis
        self._results = results

    async def _begin(self, request: admission_pb2.RequestAdmissionRequest, timeout: float) -> storage_pb2.BeginAdmissionResponse:
        try:
            return await self._storage.BeginAdmission(
                storage_pb2.BeginAdmissionRequest(
                    caller=request.caller,
                    candidate_id=request.candidate_id,
                    idempotency_key=request.idempotency_key,
                    operation_digest=request.operation_digest,
                ),
                timeout=max(timeout, 0.05),
            )
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    @rpc_boundary
    async def RequestAdmission(
        self, request: admission_pb2.RequestAdmissionRequest, context: grpc.aio.ServicerContext
    ) -> admission_pb2.RequestAdmissionResponse:
        loop = asyncio.get_running_loop()
        remaining = context.time_remaining()
        deadline = loop.time() + (remaining if remaining is not None else 30.0)
        begun = await self._begin(request, deadline - loop.time())
        if begun.outcome_json:
            return _answer(begun.outcome_json, replayed=True)
        outcome = await self._decide(begun.request_id, deadline - loop.time() - ANSWER_MARGIN_SECONDS,
                                     publish=begun.fresh)
        if outcome is None:
            # Not decided in time (or the task failed): the request stays owed to the worker
            # (storage's outbox publishes it again), and a same-key retry collects it.
            raise EngramError(Code.MUTATION_OUTCOME_UNKNOWN)
        return _answer(outcome.encode("utf-8"), replayed=False)

    async def _decide(self, request_id: str, wait: float, *, publish: bool) -> str | None:
        """Wait for the request's recorded outcome (canonical JSON), publishing its decision
        task first when this call made the request. A retry or a concurrent same-key call does
        not publish again (SPEC §7: it waits for the first call's decision); a first publish
        that was lost is published again by storage's outbox relay."""
        if wait <= 0:
            return None
        task_id = decision_task_id(request_id)
        key = self._celery.backend.get_key_for_task(task_id)
        try:
            if publish:
                await forget_result(self._redis, key)
                await asyncio.to_thread(self._celery.send_task, DECIDE_ADMISSION, args=[request_id], task_id=task_id)
            result = await self._results.wait(key, wait)
        except (RedisError, OSError, OperationalError) as exc:
            log.warning("decision task not awaited: %s", type(exc).__name__)
            return None
        except TaskFailed:
            return None
        return result if isinstance(result, str) and result else None


def results_pattern(celery: Celery) -> bytes:
    """The channel pattern of every decision's result (they share a task-id prefix)."""
    return celery.backend.get_key_for_task(decision_task_id("*"))


def _answer(outcome_json: bytes, *, replayed: bool) -> admission_pb2.RequestAdmissionResponse:
    value = {"outcome": json.loads(outcome_json), "replayed": replayed}
    return admission_pb2.RequestAdmissionResponse(value_json=canonicalize(value))
