"""The end-to-end fixture: the README's ``engram up`` as a real child process (seven services:
each its own process) against the session's MongoDB-protocol server and Redis."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from engram_cli.datastores import free_port
from engram_cli.spawn import SpawnError, SpawnedStack, spawn_up

RunningStack = SpawnedStack


@pytest.fixture(scope="session")
def stack(mongo_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedStack]:
    tag = uuid.uuid4().hex[:10]
    env = {
        **os.environ,
        "ENGRAM_MONGO_URL": mongo_url,
        "ENGRAM_MONGO_DB": f"e2e_{tag}",
        "ENGRAM_REDIS_URL": redis_url,
        "ENGRAM_DEPLOYMENT": f"e2e-{tag}",
        # The expiry sweep every second (60 by default): an expiry test waits for one.
        "ENGRAM_EXPIRY_SWEEP_SECONDS": "1",
    }
    try:
        # Two search replicas: every e2e search is spread over both (round robin), so each test
        # also checks that the replicas agree.
        running = spawn_up(tmp_path_factory.mktemp("stack") / "engram", free_port(), env,
                           extra_args=("--search-replicas", "2"))
    except SpawnError as exc:
        pytest.fail(str(exc))
    print(f"\nengram up ready in {running.startup_seconds:.2f}s")
    yield running
    running.stop()
