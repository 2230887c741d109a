"""The host registry fails closed, against a running stack: a host removed from the file is
refused within a second; an invalid file keeps the last valid registry (calls go on) and
/readyz says `degraded`; a deleted file trusts no host and /readyz is 503 until it is back."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest
from mcp.shared.exceptions import MCPError

from engram_cli.datastores import free_port
from engram_cli.spawn import SpawnError, SpawnedStack, spawn_up
from engram_hostkit import HostFile
from engram_hostkit.client import EngramClient
from engram_hostkit.examples import make_search_args
from tests.cli.helpers import own_env, readyz

PURPOSE = "purpose:registry"
# The gateway re-reads the file at most once a second; a call's own latency on top.
REVOCATION_BOUND_SECONDS = 1.5


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedStack]:
    try:
        running = spawn_up(tmp_path_factory.mktemp("registry") / "engram", free_port(), own_env())
    except SpawnError as exc:
        pytest.fail(str(exc))
    yield running
    running.stop()


def leaves(group: BaseExceptionGroup) -> Iterator[MCPError]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from leaves(exc)
        else:
            yield exc  # type: ignore[misc]


async def accepted(host: HostFile) -> bool:
    """Whether the gateway trusts the host's context: any answer but -32603 means it did."""
    refused = False
    try:
        # The client lists the tools as it connects: a refusal may come from either request.
        async with EngramClient.connect(host, principal="user:ada", purpose_ref=PURPOSE) as client:
            await client.call("engram_memory_search", make_search_args("lighthouse", PURPOSE))
    except* MCPError as errors:
        if {exc.code for exc in leaves(errors)} != {-32603}:
            raise
        refused = True
    return not refused


async def refused_within(host: HostFile, bound: float) -> float:
    started = time.monotonic()
    while await accepted(host):
        assert time.monotonic() - started <= bound, "the host was still trusted"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def ready(stack: SpawnedStack) -> tuple[int, dict]:
    answer = readyz(stack.mcp_url)
    assert answer is not None
    return answer


async def test_the_host_registry_fails_closed(stack: SpawnedStack) -> None:
    host = HostFile.load(str(stack.host_file))
    registry = stack.state_dir / "hosts.json"
    valid = registry.read_text()
    assert await accepted(host)
    status, body = ready(stack)
    assert (status, body["status"], body["host_registry"]) == (200, "ready", "ok")

    # Revocation: the host's entry removed from a valid file.
    registry.write_text('{"hosts": []}')
    revoked_after = await refused_within(host, REVOCATION_BOUND_SECONDS)
    registry.write_text(valid)
    await asyncio.sleep(1.1)
    assert await accepted(host)

    # An invalid file: the last valid registry stays in force, readiness says degraded.
    registry.write_text('{"hosts": [')
    await asyncio.sleep(1.1)
    assert await accepted(host)
    status, body = ready(stack)
    assert (status, body["status"], body["host_registry"]) == (200, "degraded", "invalid")
    registry.write_text(valid)
    await asyncio.sleep(1.1)
    assert ready(stack)[1]["status"] == "ready"

    # A missing file: no host is trusted, the gateway is not ready, until the file is back.
    os.unlink(registry)
    deleted_after = await refused_within(host, REVOCATION_BOUND_SECONDS)
    status, body = ready(stack)
    assert (status, body["status"], body["host_registry"]) == (503, "not_ready", "missing")
    registry.write_text(valid)
    await asyncio.sleep(1.1)
    assert await accepted(host)
    assert ready(stack)[0] == 200
    print(f"\nrevoked after {revoked_after:.2f}s, deleted file refused after {deleted_after:.2f}s")
