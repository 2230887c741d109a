"""A dependency away under a running stack: what a host gets (a retriable envelope, no tools —
never the -32603 trust refusal), what /readyz says, what the logs say (once when it goes, once
when it is back), and that a context is never accepted twice across a Redis restart.

Outages are made with SIGSTOP/SIGCONT (the process hangs, as behind a partition; the
supervisor does not restart a stopped process) and, for the restart case, kill -9."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engram_cli.datastores import redis_ping
from engram_cli.spawn import SpawnedStack
from engram_core.timefmt import now_ms
from engram_hostkit import HostFile
from engram_hostkit.client import CONTEXT_META_KEY, EngramClient
from engram_hostkit.examples import make_capture_args, make_search_args
from tests.cli.helpers import ALL_UP, grpc_serving, readyz, wait_for
from tests.faults.burst import PURPOSE, restarted

SEARCH = "engram_memory_search"
CAPTURE = "engram_memory_capture"
RECOVERY_SECONDS = 30.0


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


class LogWatch:
    """The JSON lines a service's log gains from now on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def lines(self) -> list[dict[str, Any]]:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            text = f.read().decode("utf-8", "replace")
        entries = []
        for line in text.splitlines():
            entries.append(json.loads(line))  # every line is JSON (a non-JSON one fails here)
        return entries

    def said(self, msg: str, dependency: str) -> int:
        return sum(1 for e in self.lines() if e.get("msg") == msg and e.get("dependency") == dependency)


def pid_of(stack: SpawnedStack, name: str) -> int:
    return int(stack.state()["children"][name]["pid"])


def short(client: EngramClient, seconds: float = 8.0) -> dict[str, str]:
    """A context whose deadline is ``seconds`` away (a hung dependency answers within it)."""
    return {CONTEXT_META_KEY: client.context(deadline_ms=now_ms() + int(seconds * 1000))}


def retriable(envelope: dict[str, Any], code: str) -> bool:
    error = envelope.get("error") or {}
    return envelope.get("ok") is False and error.get("code") == code and error.get("retriable") is True


async def until_ok(client: EngramClient, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + RECOVERY_SECONDS
    while True:
        envelope = await client.call(tool, args, meta=short(client))
        if envelope["ok"]:
            return envelope
        assert envelope["error"]["retriable"], envelope
        assert time.monotonic() < deadline, f"{tool} did not recover: {envelope['error']['code']}"


def ready_with(stack: SpawnedStack, status: int, word: str, **dependencies: str) -> dict[str, Any] | None:
    answer = readyz(stack.mcp_url)
    if answer is None or answer[0] != status or answer[1]["status"] != word:
        return None
    body = answer[1]
    return body if all(body["dependencies"][k] == v for k, v in dependencies.items()) else None


def logs(stack: SpawnedStack, name: str) -> LogWatch:
    return LogWatch(stack.state_dir / "logs" / f"{name}.log")


async def test_redis_away_is_retriable_and_readiness_names_it(owned_stack: SpawnedStack) -> None:
    stack = owned_stack
    host = HostFile.load(str(stack.host_file))
    gateway_log, worker_log = logs(stack, "gateway"), logs(stack, "worker")
    worker = stack.state()["worker_health_addr"]
    args = make_search_args("lighthouse", PURPOSE)
    async with EngramClient.connect(host, principal="user:outage", purpose_ref=PURPOSE) as client:
        assert (await client.call(SEARCH, args))["ok"]
        with frozen(pid_of(stack, "redis")):
            answers = [await client.call(SEARCH, args) for _ in range(3)]
            answers.append(await client.call(CAPTURE, make_capture_args(text=f"outage {uuid.uuid4()}", purpose_ref=PURPOSE)))
            assert all(retriable(a, "STORE_UNAVAILABLE") for a in answers), answers
            assert await client.list_tools() == []
            body = wait_for("readyz names the replay store", lambda: ready_with(
                stack, 503, "not_ready", replay_store="unavailable", storage="serving"), 10, interval=0.2)
            assert body["host_registry"] == "ok"
            wait_for("worker not ready without its broker",
                     lambda: not grpc_serving(stack.state_dir, worker, "worker") or None, 15, interval=0.2)
            assert gateway_log.said("dependency unavailable", "replay_store") == 1
        await until_ok(client, SEARCH, args)
        assert len(await client.list_tools()) == 6
    wait_for("readyz ready again", lambda: ready_with(stack, 200, "ready", **ALL_UP), RECOVERY_SECONDS, interval=0.2)
    wait_for("worker ready again", lambda: grpc_serving(stack.state_dir, worker, "worker") or None,
             RECOVERY_SECONDS, interval=0.2)
    assert gateway_log.said("dependency unavailable", "replay_store") == 1
    assert gateway_log.said("dependency available again", "replay_store") == 1
    assert worker_log.said("dependency unavailable", "broker") == 1
    assert worker_log.said("dependency available again", "broker") == 1


async def test_a_context_is_not_accepted_again_after_a_redis_restart(owned_stack: SpawnedStack) -> None:
    stack = owned_stack
    host = HostFile.load(str(stack.host_file))
    args = make_search_args("lighthouse", PURPOSE)
    async with EngramClient.connect(host, principal="user:outage", purpose_ref=PURPOSE) as client:
        used = {CONTEXT_META_KEY: client.context()}
        assert (await client.call(SEARCH, args, meta=used))["ok"]
        old = pid_of(stack, "redis")
        os.kill(old, signal.SIGKILL)
        restarted(stack, "redis", old)
        wait_for("redis answers", lambda: redis_ping(stack.state()["redis_url"]) or None, 15, interval=0.1)
        # Whether or not the append-only file kept its jti, the store's memory restarted after
        # this context was issued: it is refused retriably, never served.
        for _ in range(2):
            assert retriable(await client.call(SEARCH, args, meta=used), "STORE_UNAVAILABLE")
        await until_ok(client, SEARCH, args)
        assert retriable(await client.call(SEARCH, args, meta=used), "STORE_UNAVAILABLE")


async def test_mongodb_away_is_policy_unavailable_and_storage_not_ready(owned_stack: SpawnedStack) -> None:
    """A scope unchanged since the gateway read it is searched on (policy and head reused, the
    search replica current: no storage call); a scope changed since answers POLICY_UNAVAILABLE
    (the gateway must ask storage), and what needs storage fails retriably."""
    stack = owned_stack
    host = HostFile.load(str(stack.host_file))
    storage_log = logs(stack, "storage")
    args = make_search_args("lighthouse", PURPOSE)
    changed = f"outage-{uuid.uuid4().hex[:8]}"
    stack.admin("enable", "--tenant", changed, "--workspace", "default")
    async with EngramClient.connect(host, principal="user:outage", purpose_ref=PURPOSE) as client, \
            EngramClient.connect(host, principal="user:outage", purpose_ref=PURPOSE, tenant=changed,
                                 workspace="default") as other:
        assert (await client.call(SEARCH, args))["ok"]
        assert (await other.call(SEARCH, args))["ok"]
        # The operator turns the second scope off and on again: the gateway's copy is stale.
        stack.admin("disable", "--tenant", changed, "--workspace", "default")
        stack.admin("enable", "--tenant", changed, "--workspace", "default")
        with frozen(pid_of(stack, "mongodb")):
            served = await client.call(SEARCH, args, meta=short(client))
            assert served["ok"], served
            seen: list[str] = []
            deadline = time.monotonic() + RECOVERY_SECONDS
            while "POLICY_UNAVAILABLE" not in seen:
                envelope = await other.call(SEARCH, args, meta=short(other))
                assert envelope["ok"] is False and envelope["error"]["retriable"], envelope
                seen.append(envelope["error"]["code"])
                assert time.monotonic() < deadline, seen
            assert set(seen) <= {"POLICY_UNAVAILABLE", "DEADLINE_EXCEEDED"}, seen
            captured = await client.call(CAPTURE, make_capture_args(text=f"while mongodb is away {uuid.uuid4()}",
                                                                    purpose_ref=PURPOSE), meta=short(client))
            assert captured["ok"] is False and captured["error"]["retriable"], captured
            wait_for("readyz names storage", lambda: ready_with(
                stack, 503, "not_ready", replay_store="ok", storage="not_serving"), 15, interval=0.2)
        await until_ok(other, SEARCH, args)
    wait_for("readyz ready again", lambda: ready_with(stack, 200, "ready", **ALL_UP), RECOVERY_SECONDS, interval=0.2)
    assert storage_log.said("dependency unavailable", "mongodb") == 1
    wait_for("storage says mongodb is back",
             lambda: storage_log.said("dependency available again", "mongodb") == 1 or None, 10, interval=0.2)


async def test_search_away_degrades_but_writes_go_on(owned_stack: SpawnedStack) -> None:
    stack = owned_stack
    host = HostFile.load(str(stack.host_file))
    args = make_search_args("lighthouse", PURPOSE)
    async with EngramClient.connect(host, principal="user:outage", purpose_ref=PURPOSE) as client:
        with frozen(pid_of(stack, "search")):
            body = wait_for("readyz degraded", lambda: ready_with(stack, 200, "degraded", search="unavailable"),
                            10, interval=0.2)
            assert body["dependencies"]["storage"] == "serving" and body["dependencies"]["replay_store"] == "ok"
            captured = await client.call(CAPTURE, make_capture_args(text=f"while search is away {uuid.uuid4()}", purpose_ref=PURPOSE))
            assert captured["ok"], captured
            assert retriable(await client.call(SEARCH, args, meta=short(client, 3.0)), "DEADLINE_EXCEEDED")
        await until_ok(client, SEARCH, args)
    wait_for("readyz ready again", lambda: ready_with(stack, 200, "ready", **ALL_UP), RECOVERY_SECONDS, interval=0.2)


# Logs the project's own processes write (the datastores' are theirs: redis.log is Redis's).
OWN_LOGS = ("up", "gateway", "storage", "search", "admission", "worker", "beat")


def test_every_line_of_every_service_log_is_json(owned_stack: SpawnedStack) -> None:
    """After this module's outages, and a graceful restart of the worker (celery writes its
    shutdown notice straight to a descriptor), every line each service wrote is one JSON object."""
    stack = owned_stack
    old = pid_of(stack, "worker")
    os.kill(old, signal.SIGTERM)
    restarted(stack, "worker", old)
    worker = stack.state()["worker_health_addr"]
    wait_for("worker ready again", lambda: grpc_serving(stack.state_dir, worker, "worker") or None,
             RECOVERY_SECONDS, interval=0.2)
    files = [p for p in sorted((stack.state_dir / "logs").glob("*.log")) if p.stem.split("-")[0] in OWN_LOGS]
    assert {p.stem for p in files} >= set(OWN_LOGS)
    entries: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            try:
                entry = json.loads(line)
            except ValueError:
                raise AssertionError(f"{path.name}:{number} is not JSON: {line[:120]!r}") from None
            assert isinstance(entry, dict), (path.name, number)
            entries.setdefault(path.stem, []).append(entry)
            if path.stem != "up":  # the supervisor's log is its event record (time, event, …)
                assert {"ts", "level", "service", "logger", "msg"} <= entry.keys(), (path.name, number)
    shutdown = [e for e in entries["worker"] if "Warm shutdown" in e["msg"]]
    assert len(shutdown) == 1, shutdown
