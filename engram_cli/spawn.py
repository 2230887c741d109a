"""Run ``engram up`` as a child process and wait for its ready line (tests and benchmarks).

The child gets SIGKILL if the spawning process dies (it then stops its own children the same
way), so call :func:`spawn_up` from the main thread."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_cli.datastores import die_with_parent
from engram_cli.stackstate import DEV_AUDIENCE


class SpawnError(RuntimeError):
    pass


@dataclass
class SpawnedStack:
    proc: subprocess.Popen[str]
    mcp_url: str
    host_file: Path
    state_dir: Path
    env: dict[str, str]
    startup_seconds: float
    # What engram up printed up to and including its ready line (stdout and stderr).
    startup_output: list[str] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        """The stack's ``stack.json`` as written last."""
        return json.loads((self.state_dir / "stack.json").read_text())

    def gateway_env(self) -> dict[str, str]:
        """What a host needs to run ``engram gateway --stdio`` against this stack."""
        state = self.state()
        return {
            **self.env,
            "ENGRAM_STORAGE_ADDR": state["storage_addr"],
            "ENGRAM_SEARCH_ADDR": state["search_addr"],
            "ENGRAM_ADMISSION_ADDR": state["admission_addr"],
            "ENGRAM_REDIS_URL": state["redis_url"],
            "ENGRAM_HOST_REGISTRY": str(self.state_dir / "hosts.json"),
            "ENGRAM_AUDIENCE": DEV_AUDIENCE,
            "ENGRAM_TLS_DIR": str(self.state_dir / "pki" / "gateway"),
        }

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(self.state_dir), *args],
            env=self.env, capture_output=True, text=True, timeout=30, check=True,
        )

    def pids(self) -> dict[str, int]:
        """Child name (services and started datastores) → pid, from the stack's process table."""
        return {name: int(child["pid"]) for name, child in self.state().get("children", {}).items()}

    def stop(self, timeout: float = 30.0) -> None:
        """SIGINT (an orderly stop), then SIGKILL after ``timeout`` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spawn_up(state_dir: Path, port: int, env: dict[str, str], timeout: float = 120.0,
             extra_args: tuple[str, ...] = ()) -> SpawnedStack:
    """Start ``engram up`` (with ``extra_args``, e.g. ``--search-replicas 2``) and return once
    it printed its ready line (SpawnError otherwise)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_cli.main", "up", "--state-dir", str(state_dir), "--port", str(port),
         *extra_args],
        env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True, preexec_fn=die_with_parent(),
    )
    assert proc.stdout is not None
    output: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        output.append(line)
        if line.startswith("engram ready "):
            fields = dict(part.split("=", 1) for part in line.split()[2:])
            return SpawnedStack(proc, fields["mcp"], Path(fields["host_file"]), state_dir, env,
                                time.monotonic() - started, output)
    proc.kill()
    proc.wait()
    logs = ""
    if (state_dir / "logs").exists():
        logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((state_dir / "logs").glob("*.log")))
    raise SpawnError("engram up did not become ready:\n" + "".join(output) + logs)
