"""Start the datastores the local stack and the tests need, as child processes.

MongoDB: no real ``mongod`` is installable on this machine kind, so the default is SecantusDB
(a MongoDB wire server presenting a one-node replica set), run as its own process via its
``secantusd-py`` console script. A real MongoDB works too: give its URL instead.
Redis: used as found at the configured URL; started (``redis-server``) only when none answers.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse


class DatastoreError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if proc is not None and proc.poll() is not None:
            raise DatastoreError(f"process for {host}:{port} exited with {proc.returncode}")
        time.sleep(0.05)
    raise DatastoreError(f"nothing listening on {host}:{port} after {timeout:.0f}s")


@dataclass
class ChildProcess:
    name: str
    proc: subprocess.Popen[bytes]
    url: str

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _script(name: str) -> str:
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise DatastoreError(f"{name} not found; install the project with its dev extras")
    return found


def start_secantus(data_dir: Path, port: int | None = None, log_file: Path | None = None) -> ChildProcess:
    """Start SecantusDB on loopback; returns once it accepts connections."""
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL
    proc = subprocess.Popen(
        [_script("secantusd-py"), "--host", "127.0.0.1", "--port", str(port),
         "--storage-path", str(data_dir), "--log-level", "WARNING"],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )
    wait_port("127.0.0.1", port, 30.0, proc)
    return ChildProcess("mongodb", proc, f"mongodb://127.0.0.1:{port}/?directConnection=true")


def redis_answers(url: str) -> bool:
    parsed = urlparse(url)
    return port_open(parsed.hostname or "127.0.0.1", parsed.port or 6379)


def start_redis(port: int | None = None) -> ChildProcess:
    """Start a throwaway redis-server (no persistence) on loopback."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise DatastoreError("no Redis answers and redis-server is not installed")
    port = port or free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )
    wait_port("127.0.0.1", port, 15.0, proc)
    return ChildProcess("redis", proc, f"redis://127.0.0.1:{port}/0")


def env_url(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None
