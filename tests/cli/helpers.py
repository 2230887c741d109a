"""Helpers for the ``engram up`` tests: an environment that makes it own its datastores,
polling with a deadline, process liveness by pid and start time, and short ``engram up`` runs
that are expected to refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_cli.datastores import process_start_time
from engram_core.transport import Transport

T = TypeVar("T")


def own_env(**extra: str) -> dict[str, str]:
    """The test environment without datastore URLs and Redis namespace, so engram up starts
    its own datastores and derives its own deployment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ENGRAM_MONGO_URL", "ENGRAM_REDIS_URL", "ENGRAM_DEPLOYMENT", "ENGRAM_TASK_QUEUE")}
    return {**env, **extra}


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.05) -> T:
    """Poll ``probe`` until it returns something truthy; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(interval)


def alive(pid: int, start_time: int) -> bool:
    """Whether the process that had ``pid`` and ``start_time`` still runs (pid reuse excluded)."""
    return process_start_time(pid) == start_time


def children(state_dir: Path) -> dict[str, dict[str, int]]:
    """stack.json's children: name → {pid, start_time}."""
    data: dict[str, Any] = json.loads((state_dir / "stack.json").read_text())
    return data["children"]


def run_up(state_dir: Path, port: int, env: dict[str, str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``engram up`` to its end (for runs that must refuse to start)."""
    return subprocess.run(
        [sys.executable, "-m", "engram_cli.main", "up", "--state-dir", str(state_dir), "--port", str(port)],
        env={**env, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True, timeout=timeout,
    )


def grpc_serving(state_dir: Path, addr: str, peer: str) -> bool:
    """Whether the gRPC health service of ``peer`` at ``addr`` says SERVING (asked as the
    stack's operator)."""
    with Transport(state_dir / "pki" / "operator").sync_channel(addr, peer) as chan:
        try:
            reply = health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


# The /readyz dependencies of a stack with everything up.
ALL_UP = {"replay_store": "ok", "storage": "serving", "search": "serving", "admission": "serving"}


def readyz(mcp_url: str) -> tuple[int, dict[str, Any]] | None:
    """Status and body of the gateway's /readyz; None while nothing answers."""
    try:
        reply = httpx.get(mcp_url.removesuffix("/mcp") + "/readyz", timeout=2)
    except httpx.HTTPError:
        return None
    return reply.status_code, reply.json()


class OutputTail:
    """Collects the lines a running ``engram up`` prints after its ready line (a reader thread)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._stream = proc.stdout
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def text(self) -> str:
        """Everything read so far."""
        return "".join(self.lines)

    def wait_line(self, fragment: str, timeout: float) -> str:
        """The first line containing ``fragment``, waiting up to ``timeout`` seconds."""
        return wait_for(f"a line with {fragment!r} in:\n{self.text()}",
                        lambda: next((line for line in list(self.lines) if fragment in line), None), timeout)
