"""The internal plane's transport over real gRPC: the shared server factory requires a client
certificate of its CA and an identity entitled to the method; certificates rotate without a
restart (server and client side); plaintext only when asked for."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core import transport as transport_module
from engram_core.access import DENIED_MESSAGE, GRANTS, METHODS, permitted
from engram_core.grpc_errors import ERROR_CODE_KEY
from engram_core.grpc_server import RunningServer, create_server
from engram_core.pki import IDENTITIES, create_dev_pki
from engram_core.settings import GrpcServiceSettings
from engram_core.transport import Transport, TransportError


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    create_dev_pki(tmp_path / "pki")
    return tmp_path / "pki"


async def serve(tls_dir: Path | None, probe_port: int = 0) -> RunningServer:
    transport = Transport(tls_dir)
    return await create_server(GrpcServiceSettings(grpc_port=0, probe_port=probe_port), lambda server: None, transport)


async def health(transport: Transport, port: int, peer: str = "storage") -> str:
    async with transport.channel(f"127.0.0.1:{port}", peer) as chan:
        try:
            await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
    return "OK"


@pytest.fixture
async def server(pki: Path) -> AsyncIterator[RunningServer]:
    running = await serve(pki / "storage")
    yield running
    await running.stop(0)


async def test_every_identity_of_the_ca_may_ask_health(pki: Path, server: RunningServer) -> None:
    for name in IDENTITIES:
        assert await health(Transport(pki / name), server.port) == "OK"


async def test_no_certificate_another_ca_or_plaintext_gets_no_connection(
        pki: Path, server: RunningServer, tmp_path: Path) -> None:
    ca = (pki / "ca.crt").read_bytes()
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.port}", grpc.ssl_channel_credentials(ca)) as chan:
        with pytest.raises(grpc.aio.AioRpcError) as no_cert:
            await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert no_cert.value.code() == grpc.StatusCode.UNAVAILABLE
    create_dev_pki(tmp_path / "other")
    assert await health(Transport(tmp_path / "other" / "gateway"), server.port) == "UNAVAILABLE"
    assert await health(Transport.plaintext(), server.port) == "UNAVAILABLE"


async def test_a_server_of_another_identity_is_not_trusted_as_the_one_dialled(pki: Path, server: RunningServer) -> None:
    # The server holds the storage certificate: a client that dials "search" there refuses it.
    assert await health(Transport(pki / "gateway"), server.port, peer="search") == "UNAVAILABLE"
    assert await health(Transport(pki / "gateway"), server.port, peer="storage") == "OK"


async def test_a_method_outside_the_callers_grant_is_permission_denied(
        pki: Path, server: RunningServer, caplog: pytest.LogCaptureFixture) -> None:
    # The server registers no StorageService, yet the check runs first only for methods that
    # exist: an unknown method stays UNIMPLEMENTED. Health Watch (streaming, in no grant) is
    # refused to everyone.
    async with Transport(pki / "gateway").channel(f"127.0.0.1:{server.port}", "storage") as chan:
        with caplog.at_level(logging.WARNING, logger="engram.access"):
            stream = health_pb2_grpc.HealthStub(chan).Watch(health_pb2.HealthCheckRequest(), timeout=5)
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                async for _ in stream:
                    pass
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await storage_pb2_grpc.StorageServiceStub(chan).GetRecord(storage_pb2.GetRecordRequest(), timeout=5)
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert denied.value.details() == DENIED_MESSAGE
    assert (ERROR_CODE_KEY, "UNAUTHORIZED") in tuple(denied.value.trailing_metadata() or ())
    assert "Watch" in caplog.text and "gateway" in caplog.text
    assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_the_method_table_is_least_privilege() -> None:
    storage = "/engram.storage.v1.StorageService/"
    assert permitted(storage + "Forget", "gateway") and not permitted(storage + "Forget", "worker")
    assert not permitted(storage + "FetchRecords", "gateway")
    assert permitted(storage + "FetchRecords", "search") and not permitted(storage + "Capture", "search")
    assert permitted("/engram.admin.v1.AdminService/EnableScope", "operator")
    assert not permitted("/engram.admin.v1.AdminService/EnableScope", "gateway")
    assert not permitted(storage + "Forget", None)
    assert not permitted("/engram.storage.v1.StorageService/Nope", "gateway")
    # Every method of every service has an owner, and nobody but the operator reaches admin.
    from engram_api.admin.v1 import admin_pb2
    from engram_api.admission.v1 import admission_pb2
    from engram_api.search.v1 import search_pb2
    for module in (storage_pb2, search_pb2, admission_pb2, admin_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                name = f"/{service.full_name}/{method.name}"
                assert METHODS.get(name), name
                assert (service.name == "AdminService") == (METHODS[name] == {"operator"}), name
    assert set(GRANTS) == set(IDENTITIES)


async def test_probe_port_answers_health_only_without_a_certificate(pki: Path) -> None:
    from engram_cli.datastores import free_port
    port = free_port()
    running = await serve(pki / "storage", probe_port=port)
    try:
        assert await health(Transport.plaintext(), port) == "OK"
        async with Transport.plaintext().channel(f"127.0.0.1:{port}", "storage") as chan:
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await storage_pb2_grpc.StorageServiceStub(chan).Forget(storage_pb2.TransitionRequest(), timeout=5)
        assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await running.stop(0)


async def test_certificates_rotate_without_a_restart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport_module, "RELOAD_CHECK_SECONDS", 0.0)
    old, new = tmp_path / "old", tmp_path / "new"
    create_dev_pki(old)
    create_dev_pki(new)
    server_dir, client_dir = tmp_path / "server", tmp_path / "client"
    shutil.copytree(old / "storage", server_dir)
    shutil.copytree(old / "gateway", client_dir)
    running = await serve(server_dir)
    try:
        client = Transport(client_dir)
        stub = client.stub(health_pb2_grpc.HealthStub, f"127.0.0.1:{running.port}", "storage")
        assert (await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == 1
        for name in ("ca.crt", "tls.crt", "tls.key"):  # a whole new CA, as a rotation could be
            shutil.copy(new / "storage" / name, server_dir / name)
            shutil.copy(new / "gateway" / name, client_dir / name)
        # The server loads the new set at the next handshake: a client of the old CA is refused.
        assert await health(Transport(old / "gateway"), running.port) == "UNAVAILABLE"
        assert await health(Transport(new / "gateway"), running.port) == "OK"
        # The long-lived stub rebuilds its channel with the new certificate before its next call.
        assert (await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == 1
    finally:
        await running.stop(0)


def test_settings_choose_tls_or_explicit_plaintext(pki: Path, tmp_path: Path) -> None:
    assert Transport.from_settings(GrpcServiceSettings(tls_dir=pki / "search")).identity == "search"
    plain = Transport.from_settings(GrpcServiceSettings(grpc_plaintext=True))
    assert not plain.secure and plain.identity is None
    with pytest.raises(TransportError, match="ENGRAM_TLS_DIR"):
        Transport.from_settings(GrpcServiceSettings())
    with pytest.raises(TransportError, match="cannot read"):
        Transport(tmp_path / "missing")
    (tmp_path / "bare").mkdir()
    shutil.copy(pki / "ca.crt", tmp_path / "bare" / "tls.crt")  # a certificate naming no identity
    shutil.copy(pki / "ca.crt", tmp_path / "bare" / "ca.crt")
    shutil.copy(pki / "gateway" / "tls.key", tmp_path / "bare" / "tls.key")
    with pytest.raises(TransportError, match="no engram service identity"):
        Transport(tmp_path / "bare")


def test_the_plane_bench_runs_small() -> None:
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, str(ROOT / "bench" / "plane_bench.py"), "--calls", "60", "--connections",
                           "5", "--concurrency", "1", "4", "--json"], check=True, capture_output=True, text=True,
                          timeout=120)
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("# plane bench: 60 health checks")
    summary = json.loads(lines[-1])
    for concurrency in ("1", "4"):
        assert set(summary["unary"][concurrency]) == {"plaintext", "mtls+access"}
        assert summary["unary"][concurrency]["mtls+access"]["p50"] > 0
    assert summary["connect"]["mtls"]["p50"] > 0 and summary["context_check"]["p50"] > 0
