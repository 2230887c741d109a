"""One ``engram up`` that owns its datastores, shared by this module: its /readyz names the
run, it restarts a service and the SecantusDB child killed with SIGKILL on the same port and
data, refuses a second ``engram up`` on its state directory, and (last) stops the whole stack
when one child keeps exiting."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator

import grpc
import pytest

from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_cli.datastores import free_port
from engram_cli.spawn import SpawnedStack, spawn_up
from engram_cli.stackstate import DEV_TENANT, DEV_WORKSPACE, deployment_for
from engram_core.pki import IDENTITIES
from engram_core.transport import Transport
from tests.cli.helpers import ALL_UP, OutputTail, alive, children, grpc_serving, own_env, readyz, run_up, wait_for


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SpawnedStack, OutputTail]]:
    stack = spawn_up(tmp_path_factory.mktemp("up") / "engram", free_port(), own_env(), timeout=60)
    tail = OutputTail(stack.proc)
    try:
        yield stack, tail
    finally:
        stack.stop()


def _kill_and_wait_restart(stack: SpawnedStack, name: str) -> tuple[int, int]:
    old = stack.pids()[name]
    os.kill(old, signal.SIGKILL)
    new = wait_for(f"{name} restarted", lambda: (p := stack.pids().get(name)) != old and p, 10)
    return old, new


def test_readyz_names_this_run(up: tuple[SpawnedStack, OutputTail]) -> None:
    stack, _ = up
    state = stack.state()
    assert len(state["run_id"]) == 16
    assert readyz(stack.mcp_url) == (200, {"status": "ready", "run_id": state["run_id"], "host_registry": "ok",
                                          "dependencies": ALL_UP})
    assert state["deployment"] == deployment_for(stack.state_dir)
    assert set(state["children"]) == {"mongodb", "redis", "storage", "search", "admission", "worker", "beat",
                                      "gateway"}
    assert any("redis redis://127.0.0.1:" in line and "(started, AOF in" in line for line in stack.startup_output)
    assert (stack.state_dir / "redis" / "appendonlydir").is_dir()
    # This run's development CA: one identity per service, keys 0600, the CA's key not kept.
    pki = stack.state_dir / "pki"
    assert sorted(p.name for p in pki.iterdir() if p.is_dir()) == sorted(IDENTITIES)
    assert all(stat.S_IMODE((pki / name / "tls.key").stat().st_mode) == 0o600 for name in IDENTITIES)
    assert not [p for p in pki.rglob("*.key") if p.parent == pki]


def test_killed_service_is_restarted_on_its_port(up: tuple[SpawnedStack, OutputTail]) -> None:
    stack, tail = up
    old, new = _kill_and_wait_restart(stack, "search")
    assert new != old
    tail.wait_line("engram up: search exited with signal 9; restarting (1 of 5 in 60 s)", 5)
    state = stack.state()
    assert state["restarts"]["search"] == 1
    assert state["children"]["search"]["pid"] == new
    wait_for("search SERVING again", lambda: grpc_serving(stack.state_dir, state["search_addr"], "search"), 30, interval=0.2)
    wait_for("gateway ready again", lambda: (r := readyz(stack.mcp_url)) is not None and r[0] == 200, 30, interval=0.2)
    log = (stack.state_dir / "logs" / "up.log").read_text()
    assert '"event": "exited", "child": "search"' in log and '"event": "restarted", "child": "search"' in log


def test_killed_secantus_is_restarted_with_its_data(up: tuple[SpawnedStack, OutputTail]) -> None:
    stack, tail = up
    before = stack.state()
    _kill_and_wait_restart(stack, "mongodb")
    tail.wait_line("engram up: mongodb exited with signal 9; restarting (1 of 5 in 60 s)", 5)
    state = stack.state()
    assert state["restarts"]["mongodb"] == 1
    assert state["mongo_url"] == before["mongo_url"]
    token = (stack.state_dir / "admin-token").read_text().strip()

    request = admin_pb2.EnableScopeRequest(scope=common_pb2.Scope(tenant=DEV_TENANT, workspace=DEV_WORKSPACE))

    def scope_enabled() -> bool:
        with Transport(stack.state_dir / "pki" / "operator").sync_channel(state["storage_addr"], "storage") as chan:
            try:
                reply = admin_pb2_grpc.AdminServiceStub(chan).EnableScope(
                    request, metadata=(("authorization", f"Bearer {token}"),), timeout=5)
            except grpc.RpcError:
                return False
        return bool(reply.enabled)

    # The dev scope was written before the kill: it is still there, and storage writes again.
    wait_for("storage writes to the restarted SecantusDB", scope_enabled, 30, interval=0.3)
    # /readyz probes every backend with a 1 s deadline; on a loaded machine one probe can miss it
    # while storage reconnects, so readiness is awaited, then asserted whole.
    ready = (200, {"status": "ready", "run_id": state["run_id"], "host_registry": "ok", "dependencies": ALL_UP})
    wait_for("gateway ready again", lambda: readyz(stack.mcp_url) == ready, 30, interval=0.3)


def test_second_up_on_the_same_state_dir_is_refused(up: tuple[SpawnedStack, OutputTail]) -> None:
    stack, _ = up
    before = stack.state()
    result = run_up(stack.state_dir, free_port(), own_env(), timeout=30)
    assert result.returncode == 1
    assert (f"engram up: another engram up (pid {stack.proc.pid}) is using {stack.state_dir}; "
            "stop it or use --state-dir") in result.stderr
    after = stack.state()
    assert after["run_id"] == before["run_id"] and after["children"] == before["children"]


def test_a_child_that_keeps_exiting_stops_the_stack(up: tuple[SpawnedStack, OutputTail]) -> None:
    """Last in the module: it ends the shared stack."""
    stack, tail = up
    recorded = children(stack.state_dir)
    for _ in range(10):
        pid = stack.pids().get("gateway")
        if stack.proc.poll() is not None or pid is None:
            break
        os.kill(pid, signal.SIGKILL)
        wait_for("gateway restarted or engram up gone",
                 lambda: stack.proc.poll() is not None or stack.pids().get("gateway") != pid, 10)
    assert stack.proc.wait(timeout=30) == 1
    tail.wait_line("engram up: gateway exited with signal 9; restarting (5 of 5 in 60 s)", 5)
    tail.wait_line(f"engram up: gateway keeps exiting; stopping the stack (see {stack.state_dir / 'logs' / 'gateway.log'})", 5)
    for name, child in recorded.items():
        if name != "gateway":
            assert not alive(child["pid"], child["start_time"]), name
    assert children(stack.state_dir) == {}
