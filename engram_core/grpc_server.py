"""The gRPC service skeleton every engram service uses.

``create_server(settings, register, transport)`` binds a ``grpc.aio`` server with the standard
health service, mutual TLS and the access check of :mod:`engram_core.access` (plaintext and no
check only under the development setting ``ENGRAM_GRPC_PLAINTEXT``), keepalive and a maximum
connection age (clients reconnect, and so rebalance over pods, :func:`server_options`), and the optional
health-only probe port; ``run_until_signal`` serves until SIGTERM/SIGINT, flips health to
NOT_SERVING, then stops with the configured grace.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engram_core.access import AccessInterceptor
from engram_core.dependency import Dependency
from engram_core.settings import GrpcServiceSettings
from engram_core.transport import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS, MESSAGE_OPTIONS, MIN_PING_INTERVAL_MS, Transport


# The health service name a liveness probe asks: SERVING from start to stop, whatever the
# dependencies do. The overall service "" is readiness: NOT_SERVING also while a dependency the
# service cannot work without is away (:meth:`RunningServer.follow`), so a restart is never the
# answer to an outage of something else.
LIVENESS_SERVICE = "engram.liveness"


def _status(serving: bool) -> "health_pb2.HealthCheckResponse.ServingStatus.ValueType":
    return health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    probe: grpc.aio.Server | None = None
    stopping: bool = False

    async def set_serving(self, serving: bool) -> None:
        if serving and self.stopping:
            return
        await self.health.set("", _status(serving))

    def follow(self, dependency: Dependency) -> None:
        """Readiness follows ``dependency``: NOT_SERVING while it is away, SERVING once back
        (call from the server's event loop thread or any other)."""
        loop = asyncio.get_running_loop()

        def changed(available: bool) -> None:
            loop.call_soon_threadsafe(lambda: loop.create_task(self.set_serving(available)))

        dependency.on_change = changed

    async def stop(self, grace: float) -> None:
        self.stopping = True
        await self.set_serving(False)
        await self.health.set(LIVENESS_SERVICE, _status(False))
        await self.server.stop(grace)
        if self.probe is not None:
            await self.probe.stop(0)


def server_options(settings: GrpcServiceSettings) -> list[tuple[str, int]]:
    """The options of every engram gRPC server: message limits, keepalive, connection age."""
    options = [
        *MESSAGE_OPTIONS,
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", 2),
    ]
    if settings.grpc_max_connection_age_seconds > 0:
        options += [
            ("grpc.max_connection_age_ms", int(settings.grpc_max_connection_age_seconds * 1000)),
            ("grpc.max_connection_age_grace_ms", int(settings.grpc_max_connection_age_grace_seconds * 1000)),
        ]
    return options


async def create_server(
    settings: GrpcServiceSettings, register: Callable[[grpc.aio.Server], None], transport: Transport
) -> RunningServer:
    """Bind and start a server on settings.grpc_host:grpc_port (0 = any free port)."""
    interceptors = [AccessInterceptor()] if transport.secure else []
    server = grpc.aio.server(interceptors=interceptors, options=server_options(settings))
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = transport.add_port(server, f"{settings.grpc_host}:{settings.grpc_port}")
    if port == 0:
        raise RuntimeError(f"cannot bind gRPC port {settings.grpc_host}:{settings.grpc_port}")
    probe = None
    if settings.probe_port:
        probe = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, probe)
        if probe.add_insecure_port(f"{settings.grpc_host}:{settings.probe_port}") == 0:
            raise RuntimeError(f"cannot bind the probe port {settings.grpc_host}:{settings.probe_port}")
        await probe.start()
    await server.start()
    running = RunningServer(server, port, health_servicer, probe)
    await running.set_serving(True)
    await health_servicer.set(LIVENESS_SERVICE, _status(True))
    return running


async def wait_for_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def run_until_signal(
    running: RunningServer, grace: float, on_stop: Callable[[], Awaitable[None]] | None = None
) -> None:
    await wait_for_signal()
    await running.stop(grace)
    if on_stop is not None:
        await on_stop()
