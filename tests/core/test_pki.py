"""Development PKI over real gRPC mutual TLS: a client of the dev CA
proves its identity to the server; a client without a certificate, or with one of another CA,
gets no connection; private keys are 0600."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engram_core.pki import IDENTITIES, IdentityFiles, certificate_identity, create_dev_pki, identity_of, identity_uri

SEEN: list[str | None] = []


class Recording(health.HealthServicer):
    """The standard health servicer, recording the identity each caller proved."""

    async def Check(self, request, context):  # type: ignore[no-untyped-def, override]
        SEEN.append(identity_of(dict(context.auth_context())))
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


@pytest.fixture
async def mtls_server(tmp_path: Path) -> AsyncIterator[tuple[int, dict[str, IdentityFiles]]]:
    files = create_dev_pki(tmp_path / "pki")
    ca, cert, key = files["storage"].read()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(Recording(), server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=True))
    await server.start()
    SEEN.clear()
    try:
        yield port, files
    finally:
        await server.stop(0)


async def check(port: int, credentials: grpc.ChannelCredentials) -> str:
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        try:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
    return "OK"


async def test_a_client_of_the_dev_ca_proves_its_identity(mtls_server: tuple[int, dict[str, IdentityFiles]]) -> None:
    port, files = mtls_server
    for name in ("gateway", "search"):
        ca, cert, key = files[name].read()
        assert await check(port, grpc.ssl_channel_credentials(ca, key, cert)) == "OK"
    assert SEEN == ["gateway", "search"]


async def test_no_certificate_or_another_ca_gets_no_connection(
        mtls_server: tuple[int, dict[str, IdentityFiles]], tmp_path: Path) -> None:
    port, files = mtls_server
    ca, _, _ = files["gateway"].read()
    assert await check(port, grpc.ssl_channel_credentials(ca)) == "UNAVAILABLE"
    stranger = create_dev_pki(tmp_path / "other", ["gateway"])["gateway"]
    _, cert, key = stranger.read()
    assert await check(port, grpc.ssl_channel_credentials(ca, key, cert)) == "UNAVAILABLE"
    assert SEEN == []  # no call reached a servicer


def test_files_and_modes(tmp_path: Path) -> None:
    files = create_dev_pki(tmp_path / "pki")
    assert sorted(files) == sorted(IDENTITIES)
    assert stat.S_IMODE((tmp_path / "pki").stat().st_mode) == 0o700
    for name, item in files.items():
        assert item.directory == tmp_path / "pki" / name  # the Secret layout: ca.crt, tls.crt, tls.key
        assert stat.S_IMODE(item.directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(item.key.stat().st_mode) == 0o600
        assert certificate_identity(item.cert.read_bytes()) == name
        assert item.ca.read_bytes() == (tmp_path / "pki" / "ca.crt").read_bytes()
        assert b"PRIVATE KEY" in item.key.read_bytes() and b"PRIVATE KEY" not in item.cert.read_bytes()
    assert not list((tmp_path / "pki").rglob("ca*.key"))  # the CA's key is not kept


def test_identity_of_needs_exactly_one_known_identity() -> None:
    uri = identity_uri("gateway").encode()
    assert identity_of({"x509_subject_alternative_name": [b"localhost", uri]}) == "gateway"
    assert identity_of({}) is None
    assert identity_of({"x509_subject_alternative_name": [uri, identity_uri("operator").encode()]}) is None
    assert identity_of({"x509_subject_alternative_name": [b"spiffe://engram/intruder"]}) is None
    assert identity_of({"x509_subject_alternative_name": [b"spiffe://other/gateway"]}) is None
    with pytest.raises(ValueError):
        identity_uri("intruder")
