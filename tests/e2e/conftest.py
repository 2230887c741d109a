"""The end-to-end fixture: the README's `engram up` as a real child process (five services,
each its own process) against the session's MongoDB-protocol server and Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram_cli.datastores import free_port

READY_TIMEOUT_SECONDS = 120.0


@dataclass
class RunningStack:
    mcp_url: str
    host_file: Path
    state_dir: Path
    env: dict[str, str]
    startup_seconds: float

    def stack(self) -> dict[str, str]:
        return json.loads((self.state_dir / "stack.json").read_text())

    def gateway_env(self) -> dict[str, str]:
        """What a host needs to run `engram gateway --stdio` against this stack."""
        state = self.stack()
        return {
            **self.env,
            "ENGRAM_STORAGE_ADDR": state["storage_addr"],
            "ENGRAM_SEARCH_ADDR": state["search_addr"],
            "ENGRAM_ADMISSION_ADDR": state["admission_addr"],
            "ENGRAM_REDIS_URL": state["redis_url"],
            "ENGRAM_HOST_REGISTRY": str(self.state_dir / "hosts.json"),
            "ENGRAM_AUDIENCE": "engram-gateway-dev",
        }

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(self.state_dir), *args],
            env=self.env, capture_output=True, text=True, timeout=30, check=True,
        )


@pytest.fixture(scope="session")
def stack(mongo_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state_dir = tmp_path_factory.mktemp("stack") / "engram"
    tag = uuid.uuid4().hex[:10]
    env = {
        **os.environ,
        "ENGRAM_MONGO_URL": mongo_url,
        "ENGRAM_MONGO_DB": f"e2e_{tag}",
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_TASK_QUEUE": f"engram-e2e-{tag}",
        "PYTHONUNBUFFERED": "1",
    }
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_cli.main", "up", "--state-dir", str(state_dir), "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    assert proc.stdout is not None
    ready_line = None
    output: list[str] = []
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        output.append(line)
        if line.startswith("engram ready "):
            ready_line = line.strip()
            break
    if ready_line is None:
        proc.kill()
        logs = "".join(
            f"\n--- {p.name}\n" + p.read_text()[-3000:] for p in sorted((state_dir / "logs").glob("*.log"))
        ) if (state_dir / "logs").exists() else ""
        pytest.fail("engram up did not become ready:\n" + "".join(output) + logs)
    fields = dict(part.split("=", 1) for part in ready_line.split()[2:])
    running = RunningStack(
        mcp_url=fields["mcp"], host_file=Path(fields["host_file"]), state_dir=state_dir, env=env,
        startup_seconds=time.monotonic() - started,
    )
    print(f"\nengram up ready in {running.startup_seconds:.2f}s")
    yield running
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
