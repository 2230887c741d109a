"""Two stacks on one Redis (and one MongoDB server) never consume each other's tasks: each
``engram up`` namespaces its Redis keys by its deployment, so concurrent admissions on both
are all decided at the first call, by their own stack's worker."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from engram_cli.datastores import free_port
from engram_cli.spawn import SpawnError, SpawnedStack, spawn_up
from engram_core.taskq import redis_prefix
from tests.e2e.conftest import RunningStack
from tests.faults.burst import Burst

BURST = 12


@pytest.fixture(scope="module")
def second_stack(stack: RunningStack, mongo_url: str, redis_url: str,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpawnedStack]:
    env = {**{k: v for k, v in stack.env.items() if k not in ("ENGRAM_DEPLOYMENT",)},
           "ENGRAM_MONGO_URL": mongo_url, "ENGRAM_REDIS_URL": redis_url,
           "ENGRAM_MONGO_DB": f"e2e_second_{uuid.uuid4().hex[:8]}"}
    try:
        running = spawn_up(tmp_path_factory.mktemp("second") / "engram", free_port(), env)
    except SpawnError as exc:
        pytest.fail(str(exc))
    yield running
    running.stop()


async def test_two_stacks_on_one_redis_do_not_cross_talk(stack: RunningStack, second_stack: SpawnedStack,
                                                         redis_url: str) -> None:
    first, second = stack.state(), second_stack.state()
    assert first["redis_url"] == second["redis_url"] == redis_url
    assert first["deployment"] != second["deployment"]
    bursts = [Burst(str(s.host_file), tag=f"two{n}{uuid.uuid4().hex[:6]}", size=BURST) for n, s in
              enumerate((stack, second_stack))]
    await asyncio.gather(*(b.run(60.0) for b in bursts))
    for burst in bursts:
        assert burst.retries == {}, burst.retries  # every call answered at once, none stolen
        assert all(item.admitted["outcome"]["status"] == "accepted" for item in burst.items)
    # Every key lives under its own stack's prefix.
    client = redis.Redis.from_url(redis_url)
    try:
        for state in (first, second):
            queue = redis_prefix(state["deployment"]) + "engram"
            assert client.type(queue) in (b"list", b"none")
        assert not client.exists("unacked"), "a stack used an unprefixed Celery key"
    finally:
        client.close()
