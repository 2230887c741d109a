"""The gRPC service skeleton every engram service uses.

``create_server(settings, register)`` binds a ``grpc.aio`` server with the standard health
service; ``run_until_signal`` serves until SIGTERM/SIGINT, flips health to NOT_SERVING, then
stops with the configured grace.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engram_core.settings import GrpcServiceSettings


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self.health.set("", status)

    async def stop(self, grace: float) -> None:
        await self.set_serving(False)
        await self.server.stop(grace)


async def create_server(
    settings: GrpcServiceSettings, register: Callable[[grpc.aio.Server], None]
) -> RunningServer:
    """Bind and start a server on settings.grpc_host:grpc_port (0 = any free port)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ]
    )
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port(f"{settings.grpc_host}:{settings.grpc_port}")
    if port == 0:
        raise RuntimeError(f"cannot bind gRPC port {settings.grpc_host}:{settings.grpc_port}")
    await server.start()
    running = RunningServer(server, port, health_servicer)
    await running.set_serving(True)
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
    await running.set_serving(False)
    await running.server.stop(grace)
    if on_stop is not None:
        await on_stop()


def channel(address: str) -> grpc.aio.Channel:
    """An insecure loopback/cluster channel with the message size limits of the servers.
    Calls are spread round-robin over every address the target names (``ipv4:a:p,b:q``, or a
    ``dns:///`` name with several records: search replicas)."""
    return grpc.aio.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.max_send_message_length", 16 * 1024 * 1024),
            ("grpc.lb_policy_name", "round_robin"),
        ],
    )
