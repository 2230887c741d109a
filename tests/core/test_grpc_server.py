"""Every gRPC server's connection options: keepalive on both ends, and a maximum connection age
so that clients reconnect (and, behind one ClusterIP Service, spread over new pods) without a
failed call."""

from __future__ import annotations

import asyncio

import grpc

from engram_core.grpc_server import create_server, server_options
from engram_core.settings import GrpcServiceSettings
from engram_core.transport import CHANNEL_OPTIONS, Transport

PEER_METHOD = "/test.Peer/Who"


def test_servers_age_connections_unless_told_not_to_and_accept_the_clients_pings() -> None:
    aged = dict(server_options(GrpcServiceSettings(grpc_max_connection_age_seconds=300,
                                                   grpc_max_connection_age_grace_seconds=30)))
    assert (aged["grpc.max_connection_age_ms"], aged["grpc.max_connection_age_grace_ms"]) == (300_000, 30_000)
    forever = dict(server_options(GrpcServiceSettings(grpc_max_connection_age_seconds=0)))
    assert "grpc.max_connection_age_ms" not in forever
    client = dict(CHANNEL_OPTIONS)
    # A client never pings more often than a server accepts (else: GOAWAY too_many_pings).
    assert client["grpc.keepalive_time_ms"] >= aged["grpc.http2.min_ping_interval_without_data_ms"]
    assert GrpcServiceSettings().grpc_max_connection_age_seconds == 300


async def test_a_channel_is_rotated_at_the_maximum_age_and_no_call_fails() -> None:
    async def who(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return context.peer().encode()

    def register(server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "test.Peer", {"Who": grpc.unary_unary_rpc_method_handler(who)}),))

    settings = GrpcServiceSettings(grpc_max_connection_age_seconds=1.0, grpc_max_connection_age_grace_seconds=1.0)
    running = await create_server(settings, register, Transport.plaintext())
    peers: list[str] = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}", options=CHANNEL_OPTIONS) as channel:
            call = channel.unary_unary(PEER_METHOD)
            loop = asyncio.get_running_loop()
            until = loop.time() + 3.5
            while loop.time() < until:
                peers.append((await call(b"", timeout=5)).decode())
                await asyncio.sleep(0.05)
    finally:
        await running.stop(0)
    assert len(peers) > 30
    assert len(set(peers)) >= 2  # a new connection (a new client port) after each max age
