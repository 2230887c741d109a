"""A stack that owns its datastores (SecantusDB with sync-on-commit, Redis with AOF), with
short redelivery settings so that a fault run recovers within seconds, not minutes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engram_cli.datastores import free_port
from engram_cli.spawn import SpawnError, SpawnedStack, spawn_up
from tests.cli.helpers import own_env

# Redelivery of a task whose worker died, and the outbox's re-publish, in seconds (the
# defaults are 45 s and 10 s doubling to 300 s; the bound they give is the same shape).
FAST_RECOVERY = {
    "ENGRAM_TASK_VISIBILITY_SECONDS": "6",
    "ENGRAM_RELAY_RESEND_AFTER_SECONDS": "2",
    "ENGRAM_RELAY_RESEND_MAX_SECONDS": "6",
    "ENGRAM_TASK_RPC_SECONDS": "3",
    "ENGRAM_WORKER_STALL_SECONDS": "4",
}


@pytest.fixture(scope="module")
def owned_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedStack]:
    try:
        running = spawn_up(tmp_path_factory.mktemp("faults") / "engram", free_port(), own_env(**FAST_RECOVERY))
    except SpawnError as exc:
        pytest.fail(str(exc))
    yield running
    running.stop()
