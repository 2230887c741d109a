"""``engram admission``: the AdmissionService process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from admission_worker.results import ResultListener
from admission_worker.service import AdmissionServicer, results_pattern
from admission_worker.settings import AdmissionSettings
from engram_api.admission.v1 import admission_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core import logs
from engram_core.grpc_server import RunningServer, create_server, run_until_signal
from engram_core.taskq import make_celery
from engram_core.transport import Transport

log = logging.getLogger("engram.admission")


async def create(settings: AdmissionSettings) -> tuple[RunningServer, Callable[[], Awaitable[None]]]:
    transport = Transport.from_settings(settings)
    storage = transport.stub(storage_pb2_grpc.StorageServiceStub, settings.storage_addr, "storage")
    redis = aioredis.Redis.from_url(settings.redis_url)
    celery = make_celery(settings)
    results = ResultListener(redis, results_pattern(celery))
    results.start()
    servicer = AdmissionServicer(storage, celery, redis, results)
    running = await create_server(
        settings, lambda server: admission_pb2_grpc.add_AdmissionServiceServicer_to_server(servicer, server),
        transport,
    )

    async def close() -> None:
        await results.close()
        await storage.channel.close()
        await redis.aclose()

    return running, close


async def serve(settings: AdmissionSettings) -> None:
    running, close = await create(settings)
    log.info("admission service listening on port %d", running.port)
    await run_until_signal(running, settings.stop_grace_seconds, close)


def main() -> int:
    settings = AdmissionSettings()
    logs.configure("admission", settings.log_level)
    asyncio.run(serve(settings))
    return 0
