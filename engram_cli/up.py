"""``engram up``: the whole system on loopback, each service its own process, supervised.

Datastores: ENGRAM_MONGO_URL / ENGRAM_REDIS_URL are used exactly as given (and must answer);
unset, engram up starts its own SecantusDB (``--sync-on-commit``, data in <state_dir>/mongo)
and redis-server (append-only file in <state_dir>/redis). It generates development secrets and
a dev host, starts storage, search, admission, worker and gateway, waits until all are SERVING
and the gateway's /readyz names this run, enables the dev scope, and prints one line:

    engram ready mcp=<url> host_file=<path>

Then it supervises: a child that exits (service or datastore) is reported and restarted on
the same port, data and environment; more than 5 restarts of one child within 60 s stop the
stack (exit 1). Every child gets SIGKILL if engram up dies, however it dies. One engram up per
state directory (<state_dir>/up.lock). Ctrl-C (or SIGTERM) stops everything in reverse order.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_cli import datastores
from engram_cli.admin import enable_scope
from engram_cli.datastores import ChildProcess
from engram_cli.stackstate import (
    DEV_AUDIENCE, DEV_HOST_ID, DEV_TENANT, DEV_WORKSPACE, LockHeld, StackState, StateLock,
    deployment_for, secret_file, stop_leftovers,
)
from engram_core.crypto import Keyring
from engram_core.pki import create_dev_pki
from engram_core.transport import Transport
from engram_hostkit.hostfile import HostFile
from engram_hostkit.keys import generate_host_keys
from engram_core.hosts import upsert_host

START_TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.1
RESTART_LIMIT = 5
RESTART_WINDOW_SECONDS = 60.0
SERVICE_STOP_SECONDS = 15.0


class StackError(RuntimeError):
    pass


def _say(message: str) -> None:
    print(f"engram up: {message}", file=sys.stderr, flush=True)


def _exit_text(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"


class EventLog:
    """Child exits and restarts as JSON lines in ``<log_dir>/up.log`` (no URLs, no secrets)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, event: str, **fields: Any) -> None:
        """Append one event; a log that cannot be written never stops the supervisor."""
        line = json.dumps({"time": round(time.time(), 3), "event": event, **fields})
        try:
            with open(self.path, "a") as handle:
                handle.write(line + "\n")
        except OSError:
            pass


class RestartBudget:
    """At most ``limit`` restarts of one child within ``window`` seconds."""

    def __init__(self, limit: int = RESTART_LIMIT, window: float = RESTART_WINDOW_SECONDS) -> None:
        self.limit = limit
        self.window = window
        self._times: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)

    def spend(self, name: str, now: float | None = None) -> int | None:
        """Count one restart of ``name``: its number within the window, or None if over budget."""
        now = time.monotonic() if now is None else now
        times = self._times[name]
        while times and now - times[0] > self.window:
            times.popleft()
        times.append(now)
        return len(times) if len(times) <= self.limit else None


def service_names(search_replicas: int) -> tuple[str, ...]:
    """Start order: storage, the search replicas (``search``, ``search-2``, …), admission,
    worker, beat, gateway."""
    searches = ["search", *(f"search-{i}" for i in range(2, search_replicas + 1))]
    return ("storage", *searches, "admission", "worker", "beat", "gateway")


class Stack:
    def __init__(self, state_dir: Path, gateway_port: int, log_dir: Path, run_id: str, search_replicas: int = 1) -> None:
        if search_replicas < 1:
            raise ValueError("at least one search replica")
        self.names = service_names(search_replicas)
        self.state_dir = state_dir
        self.gateway_port = gateway_port
        self.log_dir = log_dir
        self.run_id = run_id
        self.datastores: list[ChildProcess] = []
        self.services: dict[str, ChildProcess] = {}
        self.events = EventLog(log_dir / "up.log")
        self.budget = RestartBudget()
        self._ports: dict[str, int] = {}
        self.state: StackState | None = None

    # -- preparation -------------------------------------------------------------------------

    @staticmethod
    def _given(variable: str, answers: Callable[[str], bool], what: str) -> str | None:
        url = os.environ.get(variable)
        if not url:
            return None
        if not answers(url):
            raise StackError(
                f"{variable} {datastores.redact_url(url)} does not answer; start that {what} or unset the variable"
            )
        _say(f"{what.lower()} {datastores.redact_url(url)} (given by {variable})")
        return url

    def _start_mongo(self) -> str:
        data = self.state_dir / "mongo"
        child = datastores.start_secantus(data, log_file=self.log_dir / "mongodb.log")
        self.datastores.append(child)
        _say(f"mongodb {child.url} (started SecantusDB, data in {data})")
        return child.url

    def _start_redis(self) -> str:
        data = self.state_dir / "redis"
        child = datastores.start_redis(data_dir=data, log_file=self.log_dir / "redis.log")
        self.datastores.append(child)
        _say(f"redis {child.url} (started, AOF in {data})")
        return child.url

    def _dev_host(self, state: StackState) -> HostFile:
        if state.host_file.exists():
            host = HostFile.load(str(state.host_file))
            host = HostFile(**{**host.__dict__, "mcp_url": state.mcp_url})
        else:
            private, public = generate_host_keys()
            host = HostFile(
                host_id=DEV_HOST_ID, private_key=private, public_key=public, audience=DEV_AUDIENCE,
                mcp_url=state.mcp_url, tenant=DEV_TENANT, workspace=DEV_WORKSPACE,
            )
        host.save(str(state.host_file))
        tenants = {DEV_TENANT}
        if state.host_registry.exists():
            for entry in json.loads(state.host_registry.read_text())["hosts"]:
                if entry["host_id"] == host.host_id:
                    tenants |= set(entry["allowed_tenants"])
        upsert_host(str(state.host_registry), host.host_id, host.public_key, sorted(tenants))
        return host

    def prepare(self) -> tuple[StackState, dict[str, str]]:
        """Start (or check) the datastores, write secrets and the dev host; the services' env."""
        given_mongo = self._given("ENGRAM_MONGO_URL", datastores.mongo_ping, "MongoDB")
        given_redis = self._given("ENGRAM_REDIS_URL", datastores.redis_ping, "Redis")
        mongo_url = given_mongo or self._start_mongo()
        redis_url = given_redis or self._start_redis()
        deployment = os.environ.get("ENGRAM_DEPLOYMENT") or deployment_for(self.state_dir)
        ports = {name: datastores.free_port() for name in self.names if name != "gateway"}
        searches = [f"127.0.0.1:{ports[name]}" for name in self.names if name.startswith("search")]
        state = StackState(
            state_dir=str(self.state_dir.resolve()),
            mcp_url=f"http://127.0.0.1:{self.gateway_port}/mcp",
            storage_addr=f"127.0.0.1:{ports['storage']}",
            # One replica: its address; more: a gRPC target naming all (calls round-robin).
            search_addr=searches[0] if len(searches) == 1 else "ipv4:" + ",".join(searches),
            search_replicas=searches,
            admission_addr=f"127.0.0.1:{ports['admission']}",
            worker_health_addr=f"127.0.0.1:{ports['worker']}",
            beat_health_addr=f"127.0.0.1:{ports['beat']}",
            mongo_url=mongo_url,
            redis_url=redis_url,
            run_id=self.run_id,
            deployment=deployment,
            up_pid=os.getpid(),
        )
        keyring = self.state_dir / "keyring.json"
        Keyring.ensure_dev_file(str(keyring))
        # A throwaway CA per run (its key is not kept) and one certificate per service identity.
        create_dev_pki(state.pki_dir)
        self._dev_host(state)
        env = {
            **os.environ,
            "ENGRAM_MONGO_URL": mongo_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_DEPLOYMENT": deployment,
            "ENGRAM_RUN_ID": self.run_id,
            "ENGRAM_STORAGE_ADDR": state.storage_addr,
            "ENGRAM_SEARCH_ADDR": state.search_addr,
            "ENGRAM_SEARCH_REPLICAS": ",".join(searches),
            "ENGRAM_ADMISSION_ADDR": state.admission_addr,
            "ENGRAM_KEYRING": str(keyring.resolve()),
            "ENGRAM_ADMIN_TOKEN": state.admin_token(),
            "ENGRAM_CURSOR_KEY": secret_file(self.state_dir / "cursor-key"),
            "ENGRAM_HOST_REGISTRY": str(state.host_registry),
            "ENGRAM_AUDIENCE": DEV_AUDIENCE,
            "ENGRAM_GATEWAY_HOST": "127.0.0.1",
            "ENGRAM_GATEWAY_PORT": str(self.gateway_port),
            "ENGRAM_GRPC_HOST": "127.0.0.1",
            "ENGRAM_GRPC_PLAINTEXT": "false",
        }
        self._ports = ports
        self.state = state
        self.record(state)
        return state, env

    # -- processes ---------------------------------------------------------------------------

    def start(self, env: dict[str, str]) -> None:
        """Spawn the services (from the main thread: see datastores)."""
        for name in self.names:
            child_env = dict(env)
            if name in self._ports:
                child_env["ENGRAM_GRPC_PORT"] = str(self._ports[name])
            command = "search" if name.startswith("search") else name
            # Beat is part of the worker plane: it wears the worker's identity.
            identity = "worker" if command == "beat" else command
            child_env["ENGRAM_TLS_DIR"] = str((self.state.pki_dir / identity).resolve())
            child = ChildProcess(name, [sys.executable, "-m", "engram_cli.main", command],
                                 env=child_env, log_file=self.log_dir / f"{name}.log")
            child.start()
            self.services[name] = child

    def children(self) -> list[ChildProcess]:
        """Datastores first, then services in start order."""
        return [*self.datastores, *(self.services[n] for n in self.names if n in self.services)]

    def record(self, state: StackState) -> None:
        """Write every child's pid and start time to stack.json."""
        kids = self.children()
        state.children = {c.name: {"pid": c.pid, "start_time": c.start_time or 0} for c in kids}
        state.save()

    def check_alive(self) -> None:
        """Fail if any child has exited (before the stack is ready)."""
        for child in self.children():
            code = child.poll()
            if code is not None:
                raise StackError(f"{child.name} exited with {_exit_text(code)}; see {child.log_file}")

    async def wait_ready(self, state: StackState) -> None:
        """Until every gRPC service is SERVING and the gateway's /readyz names this run."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        pending = {state.storage_addr: "storage", **{addr: "search" for addr in state.search_replicas},
                   state.admission_addr: "admission", state.worker_health_addr: "worker",
                   **({state.beat_health_addr: "worker"} if state.beat_health_addr else {})}
        operator = state.transport("operator")
        while pending:
            self.check_alive()
            if time.monotonic() > deadline:
                raise StackError("services not SERVING in time: " + ", ".join(sorted(pending)))
            for addr, peer in list(pending.items()):
                if await _grpc_serving(operator, addr, peer):
                    del pending[addr]
            await asyncio.sleep(POLL_SECONDS)
        async with httpx.AsyncClient() as client:
            while True:
                self.check_alive()
                if time.monotonic() > deadline:
                    raise StackError("gateway not ready in time")
                answer = await _readyz(client, self.gateway_port)
                if answer is not None:
                    status, run_id = answer
                    if run_id != self.run_id:
                        raise StackError(f"another server answers on port {self.gateway_port}")
                    if status == 200:
                        return
                await asyncio.sleep(POLL_SECONDS)

    def supervise(self, state: StackState) -> None:
        """Restart children that exit, forever; StackError when one keeps exiting."""
        while True:
            for child in self.children():
                code = child.poll()
                if code is not None:
                    self._restart(child, code, state)
            time.sleep(POLL_SECONDS)

    def _restart(self, child: ChildProcess, code: int, state: StackState) -> None:
        how = _exit_text(code)
        self.events.write("exited", child=child.name, pid=child.pid, exit=how)
        number = self.budget.spend(child.name)
        if number is None:
            _say(f"{child.name} exited with {how}")
            self.events.write("gave_up", child=child.name)
            raise StackError(f"{child.name} keeps exiting; stopping the stack (see {child.log_file})")
        _say(f"{child.name} exited with {how}; restarting "
             f"({number} of {RESTART_LIMIT} in {RESTART_WINDOW_SECONDS:.0f} s)")
        child.start(wait=False)
        state.restarts[child.name] = state.restarts.get(child.name, 0) + 1
        self.record(state)
        self.events.write("restarted", child=child.name, pid=child.pid, restarts=state.restarts[child.name])

    def stop(self) -> None:
        """Services in reverse order (SIGTERM, then SIGKILL), then the datastores."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        services = [self.services[n] for n in reversed(self.names) if n in self.services]
        for child in services:
            child.terminate()
        for child in services:
            child.stop(SERVICE_STOP_SECONDS)
        for child in reversed(self.datastores):
            child.stop()
        if self.state is not None:
            self.state.children = {}
            self.state.save()
        self.events.write("stopped")


async def _grpc_serving(transport: Transport, addr: str, peer: str) -> bool:
    async with transport.channel(addr, peer) as chan:
        try:
            reply = await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
        except grpc.aio.AioRpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def _readyz(client: httpx.AsyncClient, port: int) -> tuple[int, object] | None:
    """(status code, run_id of the body) of the gateway's /readyz; None if nothing answers."""
    try:
        reply = await client.get(f"http://127.0.0.1:{port}/readyz", timeout=1.0)
    except httpx.HTTPError:
        return None
    try:
        body = reply.json()
    except ValueError:
        return reply.status_code, None
    return reply.status_code, body.get("run_id") if isinstance(body, dict) else None


async def _bring_up(stack: Stack) -> StackState:
    state, env = stack.prepare()
    stack.start(env)
    stack.record(state)
    await stack.wait_ready(state)
    await enable_scope(state.transport("operator"), state.storage_addr, state.admin_token(), DEV_TENANT, DEV_WORKSPACE, [], [])
    return state


def _run(stack: Stack) -> int:
    started = time.monotonic()
    try:
        state = asyncio.run(_bring_up(stack))
        stack.events.write("ready", run_id=stack.run_id)
        print(f"engram ready mcp={state.mcp_url} host_file={state.host_file}", flush=True)
        print(f"(started in {time.monotonic() - started:.1f}s; logs in {stack.log_dir}; Ctrl-C stops)",
              file=sys.stderr, flush=True)
        stack.supervise(state)
        return 0
    except KeyboardInterrupt:
        return 0
    except (StackError, datastores.DatastoreError) as exc:
        _say(str(exc))
        return 1
    finally:
        stack.stop()


def main(argv: list[str]) -> int:
    """``engram up [--state-dir DIR] [--port P]``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="engram up", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", default=os.environ.get("ENGRAM_STATE_DIR", ".engram"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("ENGRAM_GATEWAY_PORT", "8080")))
    parser.add_argument("--search-replicas", type=int, default=1, choices=range(1, 9), metavar="N",
                        help="search replicas to run (1..8, default 1): the gateway spreads searches "
                        "over them, the worker invalidates every one")
    opts = parser.parse_args(argv)
    state_dir = Path(opts.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    lock = StateLock(state_dir)
    try:
        lock.acquire()
    except LockHeld as held:
        _say(f"another engram up (pid {held.pid or '?'}) is using {state_dir}; stop it or use --state-dir")
        return 1

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        leftovers = stop_leftovers(state_dir)
        if leftovers:
            _say(f"stopped {leftovers} processes left by an earlier engram up that did not exit cleanly")
        if not datastores.port_bindable(opts.port):
            _say(f"port {opts.port} is in use; stop what listens there or pass --port")
            return 1
        log_dir = state_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        return _run(Stack(state_dir, opts.port, log_dir, secrets.token_hex(8), opts.search_replicas))
    except KeyboardInterrupt:
        return 0
    finally:
        lock.release()
