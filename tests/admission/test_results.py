"""The admission service's shared result listener, against the real Redis: one pub/sub
connection per process serves every waiter, results published before or after a waiter starts
are seen, failures and timeouts are told apart, and a killed connection is re-subscribed
without losing a result."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from admission_worker.results import ResultListener, TaskFailed


def meta(status: str, result: object = None) -> bytes:
    return json.dumps({"status": status, "result": result, "task_id": "t"}).encode()


@pytest.fixture
async def setup(redis_url: str) -> AsyncIterator[tuple[aioredis.Redis, ResultListener, str]]:
    tag = uuid.uuid4().hex[:8]
    prefix = f"engram-test-{tag}:celery-task-meta-decide."
    client = aioredis.Redis.from_url(redis_url, client_name=f"results-{tag}")
    listener = ResultListener(client, (prefix + "*").encode())
    listener.start()
    assert await listener.wait_until_subscribed(5.0)
    try:
        yield client, listener, prefix
    finally:
        await listener.close()
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def publish(client: aioredis.Redis, key: bytes, value: bytes) -> None:
    await client.set(key, value)
    await client.publish(key, value)


async def test_many_waiters_share_one_subscription(setup: tuple[aioredis.Redis, ResultListener, str]) -> None:
    client, listener, prefix = setup
    keys = [f"{prefix}{i}".encode() for i in range(20)]
    waiters = [asyncio.create_task(listener.wait(key, 10.0)) for key in keys]
    await asyncio.sleep(0.2)
    for i, key in enumerate(reversed(keys)):
        await publish(client, key, meta("SUCCESS", f"outcome-{len(keys) - 1 - i}"))
    results = await asyncio.gather(*waiters)
    assert results == [f"outcome-{i}" for i in range(20)]
    assert listener.delivered == 20 and listener.subscriptions == 1
    assert len(await subscribers(client)) == 1


async def subscribers(client: aioredis.Redis) -> list[dict]:
    name = client.connection_pool.connection_kwargs["client_name"]
    return [entry for entry in await client.client_list(_type="pubsub") if entry.get("name") == name]


async def test_a_result_that_landed_before_the_wait_is_read(setup: tuple[aioredis.Redis, ResultListener, str]) -> None:
    client, listener, prefix = setup
    key = f"{prefix}early".encode()
    await client.set(key, meta("SUCCESS", "early"))  # set, never published to this waiter
    assert await listener.wait(key, 2.0) == "early"


async def test_pending_then_success_and_failure_and_timeout(setup: tuple[aioredis.Redis, ResultListener, str]) -> None:
    client, listener, prefix = setup
    ok, bad, silent = (f"{prefix}{name}".encode() for name in ("ok", "bad", "silent"))
    waiting_ok = asyncio.create_task(listener.wait(ok, 5.0))
    waiting_bad = asyncio.create_task(listener.wait(bad, 5.0))
    await asyncio.sleep(0.1)
    await publish(client, ok, meta("RETRY"))  # not final: the waiter keeps waiting
    await asyncio.sleep(0.1)
    assert not waiting_ok.done()
    await publish(client, ok, meta("SUCCESS", "done"))
    await publish(client, bad, meta("FAILURE", {"exc_type": "EngramError"}))
    assert await waiting_ok == "done"
    with pytest.raises(TaskFailed):
        await waiting_bad
    assert await listener.wait(silent, 0.3) is None
    assert not listener._waiters  # every waiter deregistered


async def test_a_killed_subscription_is_renewed_and_polling_covers_the_gap(
    setup: tuple[aioredis.Redis, ResultListener, str],
) -> None:
    client, listener, prefix = setup
    key = f"{prefix}after-kill".encode()
    waiting = asyncio.create_task(listener.wait(key, 10.0))
    await asyncio.sleep(0.1)
    (connection,) = await subscribers(client)
    assert await client.client_kill_filter(_id=connection["id"]) == 1
    await client.set(key, meta("SUCCESS", "survived"))  # lands while unsubscribed: no publish seen
    assert await waiting == "survived"
    assert await listener.wait_until_subscribed(10.0)
    assert listener.subscriptions >= 2
