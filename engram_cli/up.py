"""``engram up``: the whole system on loopback, each service its own process.

Starts the datastores it needs (SecantusDB unless ENGRAM_MONGO_URL is set; Redis only if none
answers at ENGRAM_REDIS_URL / 127.0.0.1:6379), generates development secrets and a dev host,
starts storage, search, admission, worker and gateway, waits until all are SERVING, enables
the dev scope, and prints one line:

    engram ready mcp=<url> host_file=<path>

Ctrl-C (or SIGTERM) stops everything in reverse order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_cli import datastores
from engram_cli.admin import enable_scope
from engram_cli.stackstate import (
    DEV_AUDIENCE, DEV_HOST_ID, DEV_TENANT, DEV_WORKSPACE, StackState, secret_file,
)
from engram_core.crypto import Keyring
from engram_hostkit.hostfile import HostFile
from engram_hostkit.keys import generate_host_keys
from gateway.hosts import upsert_host

SERVICES = ("storage", "search", "admission", "worker", "gateway")
START_TIMEOUT_SECONDS = 60.0


class StackError(RuntimeError):
    pass


class Stack:
    def __init__(self, state_dir: Path, gateway_port: int, log_dir: Path) -> None:
        self.state_dir = state_dir
        self.gateway_port = gateway_port
        self.log_dir = log_dir
        self.datastores: list[datastores.ChildProcess] = []
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._ports: dict[str, int] = {}

    # -- preparation -------------------------------------------------------------------------

    def _datastores(self) -> tuple[str, str]:
        mongo_url = os.environ.get("ENGRAM_MONGO_URL")
        if not mongo_url:
            child = datastores.start_secantus(self.state_dir / "mongo", log_file=self.log_dir / "mongodb.log")
            self.datastores.append(child)
            mongo_url = child.url
        redis_url = os.environ.get("ENGRAM_REDIS_URL") or "redis://127.0.0.1:6379/0"
        if not datastores.redis_answers(redis_url):
            child = datastores.start_redis()
            self.datastores.append(child)
            redis_url = child.url
        return mongo_url, redis_url

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
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        mongo_url, redis_url = self._datastores()
        ports = {name: datastores.free_port() for name in ("storage", "search", "admission", "worker")}
        state = StackState(
            state_dir=str(self.state_dir.resolve()),
            mcp_url=f"http://127.0.0.1:{self.gateway_port}/mcp",
            storage_addr=f"127.0.0.1:{ports['storage']}",
            search_addr=f"127.0.0.1:{ports['search']}",
            admission_addr=f"127.0.0.1:{ports['admission']}",
            worker_health_addr=f"127.0.0.1:{ports['worker']}",
            mongo_url=mongo_url,
            redis_url=redis_url,
        )
        keyring = self.state_dir / "keyring.json"
        Keyring.ensure_dev_file(str(keyring))
        self._dev_host(state)
        env = {
            **os.environ,
            "ENGRAM_MONGO_URL": mongo_url,
            "ENGRAM_REDIS_URL": redis_url,
            "ENGRAM_STORAGE_ADDR": state.storage_addr,
            "ENGRAM_SEARCH_ADDR": state.search_addr,
            "ENGRAM_ADMISSION_ADDR": state.admission_addr,
            "ENGRAM_KEYRING": str(keyring.resolve()),
            "ENGRAM_ADMIN_TOKEN": state.admin_token(),
            "ENGRAM_CURSOR_KEY": secret_file(self.state_dir / "cursor-key"),
            "ENGRAM_HOST_REGISTRY": str(state.host_registry),
            "ENGRAM_AUDIENCE": DEV_AUDIENCE,
            "ENGRAM_GATEWAY_HOST": "127.0.0.1",
            "ENGRAM_GATEWAY_PORT": str(self.gateway_port),
            "ENGRAM_GRPC_HOST": "127.0.0.1",
        }
        self._ports = ports
        state.save()
        return state, env

    # -- processes ---------------------------------------------------------------------------

    def start(self, env: dict[str, str]) -> None:
        for name in SERVICES:
            child_env = dict(env)
            if name in self._ports:
                child_env["ENGRAM_GRPC_PORT"] = str(self._ports[name])
            log = open(self.log_dir / f"{name}.log", "ab")
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "engram_cli.main", name],
                env=child_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise StackError(f"{name} exited with {proc.returncode}; see {self.log_dir / (name + '.log')}")

    def record_pids(self, state: StackState) -> None:
        state.pids = {name: proc.pid for name, proc in self.procs.items()}
        state.save()

    async def wait_ready(self, state: StackState) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        addrs = [state.storage_addr, state.search_addr, state.admission_addr, state.worker_health_addr]
        pending = set(addrs)
        while pending:
            self.check_alive()
            if time.monotonic() > deadline:
                raise StackError("services not SERVING in time: " + ", ".join(sorted(pending)))
            for addr in list(pending):
                if await _grpc_serving(addr):
                    pending.discard(addr)
            await asyncio.sleep(0.1)
        async with httpx.AsyncClient() as client:
            while True:
                self.check_alive()
                if time.monotonic() > deadline:
                    raise StackError("gateway not ready in time")
                try:
                    reply = await client.get(f"http://127.0.0.1:{self.gateway_port}/readyz", timeout=1.0)
                    if reply.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        for name in reversed(SERVICES):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name in reversed(SERVICES):
            proc = self.procs.get(name)
            if proc is None:
                continue
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for child in reversed(self.datastores):
            child.stop()


async def _grpc_serving(addr: str) -> bool:
    async with grpc.aio.insecure_channel(addr) as chan:
        try:
            reply = await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
        except grpc.aio.AioRpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def _bring_up(stack: Stack) -> StackState:
    state, env = stack.prepare()
    stack.start(env)
    stack.record_pids(state)
    await stack.wait_ready(state)
    await enable_scope(state.storage_addr, state.admin_token(), DEV_TENANT, DEV_WORKSPACE, [], [])
    return state


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="engram up", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", default=os.environ.get("ENGRAM_STATE_DIR", ".engram"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("ENGRAM_GATEWAY_PORT", "8080")))
    opts = parser.parse_args(argv)
    state_dir = Path(opts.state_dir)
    stack = Stack(state_dir, opts.port, state_dir / "logs")
    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        state = asyncio.run(_bring_up(stack))
        print(f"engram ready mcp={state.mcp_url} host_file={state.host_file}", flush=True)
        print(f"(started in {time.monotonic() - started:.1f}s; logs in {stack.log_dir}; Ctrl-C stops)", file=sys.stderr, flush=True)
        while True:
            stack.check_alive()
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0
    except (StackError, datastores.DatastoreError) as exc:
        print(f"engram up: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
