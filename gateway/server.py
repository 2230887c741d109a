"""``engram gateway``: the MCP gateway process (Streamable HTTP, or ``--stdio`` for a host that
runs it as a child process)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from contextlib import asynccontextmanager
from collections.abc import AsyncIterator
from dataclasses import dataclass

import redis.asyncio as aioredis
import uvicorn

from engram_core import logs
from engram_core.scope_changes import ScopeReadCache
from engram_core.taskq import redis_prefix
from engram_core.transport import Transport
from gateway.backends import Backends
from gateway.cancellation import PeerCancels
from engram_core.confirmation import ConfirmationVerifier
from engram_core.host_context import ContextVerifier, ReplayGuard
from gateway.dispatch import Dispatcher
from engram_core.hosts import HostRegistry
from gateway.http_server import http_config
from gateway.mcp_app import build_http_app, build_server
from gateway.settings import GatewaySettings

log = logging.getLogger("engram.gateway")


@dataclass
class Gateway:
    dispatcher: Dispatcher
    backends: Backends
    redis: aioredis.Redis
    registry: HostRegistry | None = None
    replay: ReplayGuard | None = None

    async def close(self) -> None:
        await self.backends.close()
        await self.redis.aclose()


@asynccontextmanager
async def open_gateway(settings: GatewaySettings) -> AsyncIterator[Gateway]:
    """Wire registry, replay guard, verifiers and backends from settings."""
    registry = HostRegistry.load(settings.host_registry)
    replay = ReplayGuard.connect(settings.redis_url, prefix=redis_prefix(settings.deployment) + "jti:")
    backends = Backends(Transport.from_settings(settings), settings.storage_addr, settings.search_addr,
                        settings.admission_addr)
    dispatcher = Dispatcher(
        backends,
        ContextVerifier(registry, settings.audience, replay),
        ConfirmationVerifier(registry, settings.audience, replay),
        max_call_seconds=settings.max_call_seconds,
        # On the replay guard's client: its connections move the memory epoch the stamp names.
        policies=ScopeReadCache(replay.redis, redis_prefix(settings.deployment), replay.epoch_key,
                                max_scopes=settings.policy_cache_scopes),
    )
    await replay.start()
    gateway = Gateway(dispatcher, backends, replay.redis, registry, replay)
    try:
        yield gateway
    finally:
        await gateway.close()


async def serve_http(settings: GatewaySettings) -> None:
    async with open_gateway(settings) as gw:
        app = build_http_app(build_server(gw.dispatcher), gw.backends, settings.gateway_host, run_id=settings.run_id,
                             registry=gw.registry, replay=gw.replay, body_seconds=settings.http_body_seconds)
        config = http_config(app, host=settings.gateway_host, port=settings.gateway_port,
                             max_connections=settings.http_max_connections, idle_seconds=settings.http_idle_seconds,
                             header_seconds=settings.http_header_seconds,
                             grace_seconds=int(settings.stop_grace_seconds))
        server = uvicorn.Server(config)
        log.info("gateway listening on %s:%d", settings.gateway_host, settings.gateway_port)
        await server.serve()


async def serve_stdio(settings: GatewaySettings) -> None:
    from mcp.server.stdio import stdio_server

    async with open_gateway(settings) as gw, stdio_server() as (read, write):
        cancels = PeerCancels()
        server = build_server(gw.dispatcher, cancels)
        async with cancels.watching(read) as noted:
            await server.run(noted, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engram gateway", description=__doc__)
    parser.add_argument("--stdio", action="store_true", help="serve MCP over stdin/stdout")
    opts = parser.parse_args(argv)
    settings = GatewaySettings()  # type: ignore[call-arg]
    logs.configure("gateway", settings.log_level)
    try:
        asyncio.run(serve_stdio(settings) if opts.stdio else serve_http(settings))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
