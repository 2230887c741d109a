"""The small parts of ``engram up``: URL redaction, the restart budget, the state lock,
process start times and the parent-death signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engram_cli.datastores import ChildProcess, port_bindable, process_start_time, redact_url
from engram_cli.stackstate import LockHeld, StackState, StateLock, deployment_for
from engram_cli.up import RestartBudget
from tests.cli.helpers import wait_for


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://:pw@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
    ("redis://user:pw@cache.local:6380/2", "redis://***@cache.local:6380/2"),
    ("rediss://cache.local/0?password=pw&ssl_cert_reqs=none", "rediss://cache.local/0?password=***&ssl_cert_reqs=none"),
    ("mongodb://app:pw@db1,db2/?replicaSet=rs0", "mongodb://***@db1,db2/?replicaSet=rs0"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_restart_budget_allows_five_per_minute() -> None:
    budget = RestartBudget(limit=5, window=60.0)
    assert [budget.spend("storage", t) for t in (0, 1, 2, 3, 4)] == [1, 2, 3, 4, 5]
    assert budget.spend("search", 4.5) == 1
    assert budget.spend("storage", 5) is None
    fresh = RestartBudget(limit=5, window=60.0)
    assert [fresh.spend("storage", t) for t in (0, 30, 61, 62)] == [1, 2, 2, 3]


def test_state_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    first = StateLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(LockHeld) as held:
            StateLock(tmp_path).acquire()
        assert held.value.pid == os.getpid()
    finally:
        first.release()
    again = StateLock(tmp_path)
    again.acquire()
    again.release()


def test_old_stack_json_loads_with_defaults(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text(
        '{"state_dir": "%s", "mcp_url": "u", "storage_addr": "a", "search_addr": "b", "admission_addr": "c",'
        ' "worker_health_addr": "d", "mongo_url": "m", "redis_url": "r", "pids": {"storage": 1}, "later": 1}'
        % tmp_path
    )
    state = StackState.load(tmp_path)
    assert (state.run_id, state.deployment, state.children, state.restarts) == ("", "", {}, {})
    assert deployment_for(tmp_path).startswith("up-") and len(deployment_for(tmp_path)) == 15
    assert deployment_for(tmp_path) == deployment_for(tmp_path / "." )


def test_process_start_time_sees_zombies_as_gone() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert process_start_time(proc.pid) is not None
        os.kill(proc.pid, signal.SIGKILL)
        wait_for("the child a zombie", lambda: process_start_time(proc.pid) is None, 5, interval=0.01)
    finally:
        proc.kill()
        proc.wait()
    assert process_start_time(2**22 + 1) is None


def test_a_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A middle process spawns a ChildProcess and is killed: the grandchild gets SIGKILL."""
    pid_file = tmp_path / "pid"
    script = (
        "import sys, time; from pathlib import Path; from engram_cli.datastores import ChildProcess\n"
        "c = ChildProcess('sleeper', ['sleep', '60']); c.start()\n"
        f"Path({str(pid_file)!r}).write_text(f'{{c.pid}} {{c.start_time}}'); time.sleep(60)\n"
    )
    middle = subprocess.Popen([sys.executable, "-c", script])
    try:
        text = wait_for("grandchild spawned", lambda: pid_file.exists() and pid_file.read_text(), 20)
        pid, start = (int(x) for x in text.split())
        assert process_start_time(pid) == start
        middle.kill()
        middle.wait()
        wait_for("grandchild gone", lambda: process_start_time(pid) != start, 5, interval=0.01)
    finally:
        middle.kill()
        middle.wait()


def test_port_bindable() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not port_bindable(sock.getsockname()[1])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert port_bindable(port)


def test_child_process_restarts_with_same_argv(tmp_path: Path) -> None:
    child = ChildProcess("sleeper", ["sleep", "60"], log_file=tmp_path / "sleeper.log")
    child.start()
    first = child.pid
    child.proc.kill()
    child.proc.wait()
    child.start()
    try:
        assert child.pid != first and child.poll() is None
        assert child.proc.args == ["sleep", "60"]
    finally:
        child.stop(timeout=5)
    assert child.poll() == -signal.SIGTERM
