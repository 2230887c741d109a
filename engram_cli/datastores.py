"""Start the datastores the local stack and the tests need, as child processes.

MongoDB: no real ``mongod`` is installable on this machine kind, so the default is SecantusDB
(a MongoDB wire server presenting a one-node replica set), run as its own process via its
``secantusd-py`` console script, always with ``--sync-on-commit`` (an acknowledged write
survives a kill -9 of the server). A real MongoDB works too: give its URL instead.
Redis: ``redis-server``; with a data directory it keeps an append-only file (fsync every
second), so queued tasks and replay entries survive a restart; without one it is throwaway.

Every child is spawned with a parent-death signal (Linux ``PR_SET_PDEATHSIG``): it is killed
when the process that spawned it dies, even by SIGKILL. PDEATHSIG fires when the spawning
*thread* exits, so spawn children only from the main thread.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

PR_SET_PDEATHSIG = 1


class DatastoreError(RuntimeError):
    pass


# -- ports -----------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``host:port`` now (SO_REUSEADDR, as servers set it)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until ``host:port`` accepts connections; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if proc is not None and proc.poll() is not None:
            raise DatastoreError(f"process for {host}:{port} exited with {proc.returncode}")
        time.sleep(0.05)
    raise DatastoreError(f"nothing listening on {host}:{port} after {timeout:.0f}s")


# -- processes -------------------------------------------------------------------------------


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent dies.

    Everything is resolved here, before the fork; the child only calls into libc."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    option, sig, zero = ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0)

    def preexec() -> None:
        prctl(option, sig, zero, zero, zero)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot); None if no live process has it.

    A zombie counts as gone: it holds no resources and cannot be killed further."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # fields[0] is field 3 (state)
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class ChildProcess:
    """One supervised child: how to start it again on the same port, data and environment."""

    name: str
    argv: list[str]
    url: str = ""
    env: dict[str, str] | None = None
    log_file: Path | None = None
    # When set, :meth:`start` waits until this loopback port accepts connections.
    port: int | None = None
    ready_timeout: float = 30.0
    proc: subprocess.Popen[bytes] = field(init=False)
    start_time: int | None = field(init=False, default=None)

    def start(self, wait: bool = True) -> None:
        """Spawn the process (from the main thread); with ``wait``, until its port answers."""
        out: IO[bytes] | int = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=die_with_parent(),
            )
        finally:
            if not isinstance(out, int):
                out.close()
        self.start_time = process_start_time(self.proc.pid)
        if wait and self.port is not None:
            try:
                wait_port("127.0.0.1", self.port, self.ready_timeout, self.proc)
            except DatastoreError:
                self.stop()
                raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal), or None while it runs."""
        return self.proc.poll()

    def terminate(self) -> None:
        """Send SIGTERM if it still runs."""
        if self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; reaps the process."""
        self.terminate()
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


OPLOG_RETENTION_SECONDS, OPLOG_MAX_ENTRIES = 60, 5000


def start_secantus(data_dir: Path, port: int | None = None, log_file: Path | None = None) -> ChildProcess:
    """Start SecantusDB (``--sync-on-commit``) on loopback; returns once it accepts connections.

    Restart the returned child with ``child.start()``: same port, same data directory."""
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    child = ChildProcess(
        "mongodb",
        [_script("secantusd-py"), "--host", "127.0.0.1", "--port", str(port),
         "--storage-path", str(data_dir), "--sync-on-commit", "--log-level", "WARNING",
         # Nothing reads the oplog (no change streams, no replicas): keep it short, or it
         # holds ~20 KB of disk per memory for an hour.
         "--oplog-retention-seconds", str(OPLOG_RETENTION_SECONDS), "--oplog-max-entries", str(OPLOG_MAX_ENTRIES)],
        url=f"mongodb://127.0.0.1:{port}/?directConnection=true", log_file=log_file, port=port,
    )
    child.start()
    return child


def start_redis(port: int | None = None, data_dir: Path | None = None, log_file: Path | None = None) -> ChildProcess:
    """Start redis-server on loopback; returns once it accepts connections.

    With ``data_dir``: append-only file there (fsync every second, no RDB snapshots), so a
    restart on the same port and directory (``child.start()``) comes back with the data.
    Without: throwaway, no persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise DatastoreError("redis-server is not installed (it must be on PATH)")
    port = port or free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
    if data_dir is None:
        argv += ["--appendonly", "no"]
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        argv += ["--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(data_dir.resolve())]
    child = ChildProcess("redis", argv, url=f"redis://127.0.0.1:{port}/0", log_file=log_file,
                         port=port, ready_timeout=15.0)
    child.start()
    return child


# -- given datastores ------------------------------------------------------------------------


def redact_url(url: str) -> str:
    """``url`` without its credentials (user info and any ``password`` query parameter)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if "password" in k.lower() else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redis_ping(url: str) -> bool:
    """Whether a real Redis answers PING at ``url`` (within about a second)."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    except ValueError:
        return False
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def redis_answers(url: str) -> bool:
    """Whether something accepts connections at the host and port of a Redis URL."""
    parsed = urlsplit(url)
    return port_open(parsed.hostname or "127.0.0.1", parsed.port or 6379)


def mongo_ping(url: str) -> bool:
    """Whether a MongoDB server answers ``ping`` at ``url`` (within about 3 s)."""
    import pymongo
    from pymongo.errors import PyMongoError

    try:
        client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(url, serverSelectionTimeoutMS=3000)
    except (PyMongoError, ValueError):
        return False
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False
    finally:
        client.close()


def env_url(*names: str) -> str | None:
    """The first of these environment variables that is set and not empty."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None
