"""``engram search``: the SearchService process."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from engram_api.search.v1 import search_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core import logs
from engram_core.grpc_server import RunningServer, channel, create_server, run_until_signal
from search_service.cursors import CursorCodec
from search_service.projection import Projections
from search_service.service import SearchServicer
from search_service.settings import SearchSettings

log = logging.getLogger("engram.search")


async def create(settings: SearchSettings) -> tuple[RunningServer, Callable[[], Awaitable[None]]]:
    storage_channel = channel(settings.storage_addr)
    pool = ThreadPoolExecutor(max_workers=settings.search_threads, thread_name_prefix="engram-search")
    servicer = SearchServicer(
        Projections(storage_pb2_grpc.StorageServiceStub(storage_channel), settings.storage_rpc_seconds,
                    budget_bytes=settings.projection_budget_bytes,
                    progress_seconds=settings.projection_progress_seconds),
        CursorCodec(settings.cursor_key.encode("utf-8"), ttl_ms=settings.cursor_ttl_seconds * 1000),
        pinned_hits=settings.pinned_hits,
        pool=pool,
        page_cache_bytes=settings.page_cache_bytes,
    )
    running = await create_server(
        settings, lambda server: search_pb2_grpc.add_SearchServiceServicer_to_server(servicer, server)
    )
    servicer.replica_id = settings.replica_id or f"{socket.gethostname()}:{running.port}"

    async def close() -> None:
        await storage_channel.close()
        pool.shutdown(wait=False, cancel_futures=True)

    return running, close


async def serve(settings: SearchSettings) -> None:
    running, close = await create(settings)
    log.info("search service listening on port %d", running.port)
    await run_until_signal(running, settings.stop_grace_seconds, close)


def main() -> int:
    settings = SearchSettings()  # type: ignore[call-arg]
    logs.configure("search", settings.log_level)
    asyncio.run(serve(settings))
    return 0
