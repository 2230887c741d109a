"""Fixtures for the host integration protocol: a real Redis, host keys, a registry file, an
injectable clock, and verifiers wired together as the gateway wires them."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from engram_core.schemas.tools import TOOL_NAMES
from engram_hostkit.keys import generate_host_keys
from engram_hostkit.tokens import mint_confirmation, mint_context
from engram_core.confirmation import ConfirmationVerifier
from engram_core.host_context import ContextVerifier, InvocationContext, ReplayGuard
from engram_core.hosts import HostRegistry

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
AUDIENCE = "engram-test-gateway"
HOST_ID = "host-a"
OTHER_HOST_ID = "host-b"
TENANT = "acme"
FORGET_ARGS = {"record_id": "mem_" + "a" * 52, "idempotency_key": "forget-key-0000001", "reason_ref": "reason:user-asked"}
FORGET_TARGET = FORGET_ARGS["record_id"]


class Clock:
    """A settable clock: ``clock()`` returns ``clock.now``."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A redis.asyncio client on the test Redis; the session fails if Redis does not answer."""
    client = aioredis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=2)
    try:
        await client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here must stop the session loudly
        await client.aclose()
        pytest.fail(f"Redis at {redis_url} is unreachable: {exc!r}")
    yield client
    await client.aclose()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def replay_prefix(redis_client: aioredis.Redis, session_tag: str) -> AsyncIterator[str]:
    """A key prefix unique to this test session; its keys are deleted at the end."""
    prefix = f"engram-test:{session_tag}:jti:"
    yield prefix
    keys = [key async for key in redis_client.scan_iter(match=prefix + "*", count=500)]
    if keys:
        await redis_client.delete(*keys)


@dataclass
class Host:
    host_id: str
    private_key: str
    public_key: str
    tenants: list[str]


def write_registry(path: Path, hosts: list[Host]) -> None:
    document = {
        "hosts": [
            {"host_id": h.host_id, "public_key": h.public_key, "allowed_tenants": h.tenants} for h in hosts
        ]
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


@dataclass
class Harness:
    host: Host
    other: Host
    registry_path: Path
    registry: HostRegistry
    clock: Clock
    mono: Clock
    guard: ReplayGuard
    contexts: ContextVerifier
    confirmations: ConfirmationVerifier

    def context(self, host: Host | None = None, **overrides: Any) -> str:
        """A context token, valid at ``NOW`` unless ``overrides`` say otherwise."""
        host = host or self.host
        kwargs: dict[str, Any] = {
            "host_id": host.host_id,
            "audience": AUDIENCE,
            "tenant": TENANT,
            "workspace": "ws-1",
            "principal": "user:alice",
            "agent_id": "agent-1",
            "session": "session-1",
            "purpose_ref": "purpose:test",
            "tools": list(TOOL_NAMES),
            "deadline_ms": int(NOW * 1000) + 60_000,
            "now": NOW,
        }
        kwargs.update(overrides)
        return mint_context(host.private_key, **kwargs)

    async def verified(self, **overrides: Any) -> InvocationContext:
        return await self.contexts.verify(self.context(**overrides), None)

    def confirmation(self, ctx: InvocationContext, host: Host | None = None, **overrides: Any) -> str:
        """A confirmation for forget of ``FORGET_TARGET`` bound to ``ctx``, approved at ``NOW``."""
        host = host or self.host
        kwargs: dict[str, Any] = {
            "host_id": host.host_id,
            "audience": AUDIENCE,
            "tenant": ctx.tenant,
            "workspace": ctx.workspace,
            "principal": ctx.principal,
            "tool": "engram_memory_forget",
            "target": FORGET_TARGET,
            "arguments": FORGET_ARGS,
            "approver": "human:bob",
            "now": NOW,
        }
        kwargs.update(overrides)
        return mint_confirmation(host.private_key, **kwargs)

    async def confirm(self, token: str | None, ctx: InvocationContext, **call: Any):
        kwargs: dict[str, Any] = {"tool": "engram_memory_forget", "target": FORGET_TARGET, "arguments": FORGET_ARGS}
        kwargs.update(call)
        return await self.confirmations.verify(token, ctx=ctx, **kwargs)


def new_host(host_id: str, tenants: list[str]) -> Host:
    private_key, public_key = generate_host_keys()
    return Host(host_id, private_key, public_key, tenants)


@pytest.fixture
def harness(tmp_path: Path, redis_client: aioredis.Redis, replay_prefix: str) -> Iterator[Harness]:
    host = new_host(HOST_ID, [TENANT, "beta"])
    other = new_host(OTHER_HOST_ID, ["other-tenant", TENANT])
    path = tmp_path / "hosts.json"
    write_registry(path, [host, other])
    mono = Clock(1000.0)
    registry = HostRegistry.load(str(path), clock=mono)
    clock = Clock(NOW)
    guard = ReplayGuard(redis_client, prefix=replay_prefix)
    yield Harness(
        host=host,
        other=other,
        registry_path=path,
        registry=registry,
        clock=clock,
        mono=mono,
        guard=guard,
        contexts=ContextVerifier(registry, AUDIENCE, guard, clock=clock),
        confirmations=ConfirmationVerifier(registry, AUDIENCE, guard, clock=clock),
    )
