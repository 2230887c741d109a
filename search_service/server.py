"""``engram search``: the SearchService process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from engram_api.search.v1 import search_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core import logs
from engram_core.grpc_server import RunningServer, create_server, run_until_signal
from engram_core.transport import Transport
from search_service import kernels
from search_service.cursors import CursorCodec
from search_service.embedding import Embedder, EmbeddingUnavailable
from search_service.projection import Projections
from search_service.service import SEMANTIC_DISABLED, SearchServicer
from search_service.settings import SearchSettings

# Seconds a stopping replica waits for the vectors it is still handing to storage.
VECTORS_FLUSH_SECONDS = 2.0

log = logging.getLogger("engram.search")


async def create(settings: SearchSettings) -> tuple[RunningServer, Callable[[], Awaitable[None]]]:
    transport = Transport.from_settings(settings)
    storage = transport.stub(storage_pb2_grpc.StorageServiceStub, settings.storage_addr, "storage")
    pool = ThreadPoolExecutor(max_workers=settings.search_threads, thread_name_prefix="engram-search")
    await warm_kernels()
    embedder, semantic_off = await load_embedder(settings)
    projections = Projections(storage, settings.storage_rpc_seconds,
                              budget_bytes=settings.projection_budget_bytes,
                              progress_seconds=settings.projection_progress_seconds, embedder=embedder, pool=pool)
    servicer = SearchServicer(
        projections,
        CursorCodec(settings.cursor_key.encode("utf-8"), ttl_ms=settings.cursor_ttl_seconds * 1000),
        pinned_hits=settings.pinned_hits,
        pool=pool,
        page_cache_bytes=settings.page_cache_bytes,
        embedder=embedder,
        semantic_off=semantic_off,
    )
    running = await create_server(
        settings, lambda server: search_pb2_grpc.add_SearchServiceServicer_to_server(servicer, server), transport
    )
    servicer.replica_id = settings.replica_id or f"{socket.gethostname()}:{running.port}"

    async def close() -> None:
        # Vectors still on their way to storage get a moment (else a later build embeds them again).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(projections.vectors_kept(), VECTORS_FLUSH_SECONDS)
        await storage.channel.close()
        pool.shutdown(wait=False, cancel_futures=True)

    return running, close


async def warm_kernels() -> None:
    """Compile (or load from numba's cache) the scoring kernels before the first search."""
    started = time.perf_counter()
    await asyncio.get_running_loop().run_in_executor(None, kernels.warm)
    log.info("scoring kernels ready in %.2f s", time.perf_counter() - started)


async def load_embedder(settings: SearchSettings) -> tuple[Embedder | None, str]:
    """The semantic channel's verified model, or None and the constant reason it is off (a
    refused model is logged by the loader; the service runs lexical-only, never a different
    model)."""
    if not settings.semantic_channel:
        log.info("semantic channel off: %s", SEMANTIC_DISABLED)
        return None, SEMANTIC_DISABLED
    try:
        embedder = await asyncio.get_running_loop().run_in_executor(None, Embedder.load, settings.embedding_threads)
    except EmbeddingUnavailable as exc:
        return None, exc.reason
    log.info("semantic channel on: %s", embedder.config()["model"])
    return embedder, ""


async def serve(settings: SearchSettings) -> None:
    running, close = await create(settings)
    log.info("search service listening on port %d", running.port)
    await run_until_signal(running, settings.stop_grace_seconds, close)


def main() -> int:
    settings = SearchSettings()  # type: ignore[call-arg]
    logs.configure("search", settings.log_level)
    asyncio.run(serve(settings))
    return 0
