"""The state directory of a local stack (``.engram/`` by default): generated secrets (mode
0600), this run's development CA and service certificates (``pki/``), the host registry, the dev host file, datastore data, the lock of the ``engram up``
using it (``up.lock``) and the addresses and processes of the running stack (``stack.json``)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import signal
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engram_core.hosts import upsert_host
from engram_cli.datastores import process_start_time
from engram_hostkit.hostfile import HostFile
from engram_core.transport import Transport

DEV_HOST_ID = "engram-dev-host"
DEV_AUDIENCE = "engram-gateway-dev"
DEV_TENANT = "dev"
DEV_WORKSPACE = "default"


def secret_file(path: Path, nbytes: int = 32) -> str:
    """Read the secret in ``path``, creating it (0600) on first use."""
    if path.exists():
        return path.read_text().strip()
    value = secrets.token_urlsafe(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value


@dataclass
class StackState:
    state_dir: str
    mcp_url: str
    storage_addr: str
    search_addr: str
    admission_addr: str
    worker_health_addr: str
    mongo_url: str
    redis_url: str
    # Child name (services and the datastores this run started) → {"pid", "start_time"}
    # (field 22 of /proc/<pid>/stat): what a later run may kill as a leftover, never a reused pid.
    children: dict[str, dict[str, int]] = field(default_factory=dict)
    # Child name → restarts after the stack was ready.
    restarts: dict[str, int] = field(default_factory=dict)
    # This run's identity (the gateway's /readyz names it) and its Redis namespace.
    run_id: str = ""
    deployment: str = ""
    up_pid: int = 0
    # Every search replica's address (search_addr names them all when there are several).
    search_replicas: list[str] = field(default_factory=list)
    # The beat's health server (empty in a state written before there was one).
    beat_health_addr: str = ""

    @property
    def dir(self) -> Path:
        return Path(self.state_dir)

    @property
    def host_registry(self) -> Path:
        return self.dir / "hosts.json"

    @property
    def host_file(self) -> Path:
        return self.dir / "host.json"

    def admin_token(self) -> str:
        return secret_file(self.dir / "admin-token")

    @property
    def pki_dir(self) -> Path:
        """This run's development CA: ``pki/<identity>/`` is one process's ``ENGRAM_TLS_DIR``."""
        return self.dir / "pki"

    def transport(self, identity: str = "operator") -> Transport:
        """How a local client speaks to this stack's services, as ``identity``."""
        return Transport(self.pki_dir / identity)

    def save(self) -> None:
        """Write ``stack.json`` atomically (readers never see half a file)."""
        path = self.dir / "stack.json"
        tmp = path.with_name(f".stack.json.{os.getpid()}")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, state_dir: Path) -> "StackState":
        """Read ``stack.json``; fields this version does not know are ignored."""
        data = json.loads((state_dir / "stack.json").read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def allow_dev_host_tenant(self, tenant: str) -> None:
        """Let the dev host act for ``tenant`` too (the gateway reloads the registry)."""
        host = HostFile.load(str(self.host_file))
        data = json.loads(self.host_registry.read_text())
        entry = next(h for h in data["hosts"] if h["host_id"] == host.host_id)
        tenants = sorted(set(entry["allowed_tenants"]) | {tenant})
        upsert_host(str(self.host_registry), host.host_id, host.public_key, tenants)


def deployment_for(state_dir: Path) -> str:
    """The Redis namespace of the stack in ``state_dir``: stable per directory."""
    return "up-" + hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


class LockHeld(RuntimeError):
    """Another ``engram up`` holds the state directory (``pid`` is what its lock file says)."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(f"state directory locked by pid {pid}")
        self.pid = pid


class StateLock:
    """An exclusive ``flock`` on ``<state_dir>/up.lock``, holding the owner's pid.

    The kernel drops it when the owner exits, however it exits."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "up.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`LockHeld` at once."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise LockHeld(int(text) if text.isdigit() else None) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _recorded_children(state_dir: Path) -> list[tuple[int, int]]:
    try:
        data: Any = json.loads((state_dir / "stack.json").read_text())
        entries = data.get("children", {}).values()
        return [(int(e["pid"]), int(e["start_time"])) for e in entries if e.get("start_time") is not None]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []


def stop_leftovers(state_dir: Path, timeout: float = 10.0) -> int:
    """SIGKILL the children an earlier run recorded in ``stack.json`` that still run.

    A pid counts only if its start time is the recorded one (else the pid was reused and
    is left alone). Waits until they are gone; returns how many were killed. Call it with
    the state lock held."""
    killed: list[tuple[int, int]] = []
    for pid, start_time in _recorded_children(state_dir):
        if pid == os.getpid() or process_start_time(pid) != start_time:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append((pid, start_time))
    deadline = time.monotonic() + timeout
    while any(process_start_time(p) == t for p, t in killed) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(killed)
