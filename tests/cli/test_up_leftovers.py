"""A killed ``engram up`` leaves nothing running: its children die with it (parent-death
signal), and a later ``engram up`` on the same state directory kills whatever stack.json
still lists as alive with the same start time — never a pid that was reused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_cli.datastores import free_port, process_start_time
from engram_cli.spawn import spawn_up
from tests.cli.helpers import ALL_UP, alive, children, own_env, readyz, wait_for

CLEANUP = "engram up: stopped {n} processes left by an earlier engram up that did not exit cleanly"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_sigkill_of_up_takes_every_child_along(tmp_path: Path) -> None:
    state_dir = tmp_path / "engram"
    first = spawn_up(state_dir, free_port(), own_env(), timeout=60)
    try:
        recorded = children(state_dir)
        assert len(recorded) == 8  # mongodb, redis and six services
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=5)
        wait_for("every child of the killed engram up gone",
                 lambda: not any(alive(c["pid"], c["start_time"]) for c in recorded.values()), 5, interval=0.02)
    finally:
        first.stop()
    second = spawn_up(state_dir, free_port(), own_env(), timeout=60)
    try:
        assert not any("processes left by an earlier" in line for line in second.startup_output)
        state = second.state()
        assert readyz(second.mcp_url) == (200, {"status": "ready", "run_id": state["run_id"], "host_registry": "ok",
                                          "dependencies": ALL_UP})
        assert state["run_id"] != ""
    finally:
        second.stop()
    assert children(state_dir) == {}


def test_live_leftovers_are_killed_and_reused_pids_are_not(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    state_dir = tmp_path / "engram"
    state_dir.mkdir()
    orphan = subprocess.Popen(["sleep", "60"])
    stranger = subprocess.Popen(["sleep", "60"])
    sleepers += [orphan, stranger]
    orphan_start = wait_for("orphan started", lambda: process_start_time(orphan.pid), 5)
    stranger_start = wait_for("stranger started", lambda: process_start_time(stranger.pid), 5)
    (state_dir / "stack.json").write_text(json.dumps({"children": {
        "storage": {"pid": orphan.pid, "start_time": orphan_start},
        # Same pid as recorded, another start time: a process that reused the pid.
        "search": {"pid": stranger.pid, "start_time": stranger_start + 1},
    }}))
    stack = spawn_up(state_dir, free_port(), own_env(), timeout=60)
    try:
        assert CLEANUP.format(n=1) + "\n" in stack.startup_output
        assert orphan.wait(timeout=5) == -signal.SIGKILL
        assert stranger.poll() is None and alive(stranger.pid, stranger_start)
    finally:
        stack.stop()
