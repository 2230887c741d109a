"""The state directory of a local stack (``.engram/`` by default): generated secrets (mode
0600), the host registry, the dev host file, datastore data and the addresses of the running
processes (``stack.json``)."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gateway.hosts import upsert_host
from engram_hostkit.hostfile import HostFile

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
    pids: dict[str, int] = field(default_factory=dict)

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

    def save(self) -> None:
        (self.dir / "stack.json").write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, state_dir: Path) -> "StackState":
        return cls(**json.loads((state_dir / "stack.json").read_text()))

    def allow_dev_host_tenant(self, tenant: str) -> None:
        """Let the dev host act for ``tenant`` too (the gateway reloads the registry)."""
        host = HostFile.load(str(self.host_file))
        data = json.loads(self.host_registry.read_text())
        entry = next(h for h in data["hosts"] if h["host_id"] == host.host_id)
        tenants = sorted(set(entry["allowed_tenants"]) | {tenant})
        upsert_host(str(self.host_registry), host.host_id, host.public_key, tenants)
