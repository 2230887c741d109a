"""``engram up`` refuses at once, starting nothing, when its gateway port is taken or a
given datastore URL does not answer (the message names the URL without its password)."""

from __future__ import annotations

import socket
from pathlib import Path

from engram_cli.datastores import free_port
from tests.cli.helpers import own_env, run_up


def _started_nothing(state_dir: Path) -> None:
    assert not (state_dir / "stack.json").exists()
    assert not (state_dir / "mongo").exists()
    assert not (state_dir / "redis").exists()


def test_gateway_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_up(tmp_path / "engram", port, own_env(), timeout=30)
    assert result.returncode == 1
    assert f"engram up: port {port} is in use; stop what listens there or pass --port" in result.stderr
    _started_nothing(tmp_path / "engram")


def test_given_redis_that_does_not_answer(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://:s3cret-pw@127.0.0.1:{port}/0"
    result = run_up(tmp_path / "engram", free_port(), own_env(ENGRAM_REDIS_URL=url), timeout=30)
    assert result.returncode == 1
    assert (f"engram up: ENGRAM_REDIS_URL redis://***@127.0.0.1:{port}/0 does not answer; "
            "start that Redis or unset the variable") in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr
    _started_nothing(tmp_path / "engram")
