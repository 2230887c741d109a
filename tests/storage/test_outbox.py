"""The outbox relay publishes effects to Celery over the real Redis broker, ids only."""

from __future__ import annotations

import asyncio
import base64
import json

import redis.asyncio as aioredis

from engram_core.taskq import DESTROY_KEY, INVALIDATE_PROJECTION
from tests.storage.helpers import Storage, Who, admit, capture, enable, transition_request


async def queued(redis: aioredis.Redis, queue: str, want: int, timeout: float = 10.0) -> list[dict]:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        items = await redis.lrange(queue, 0, -1)
        if len(items) >= want:
            return [json.loads(item) for item in items]
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {want} messages on {queue}")


async def test_forget_publishes_erasure_tasks_that_carry_only_ids(storage: Storage, redis_url: str) -> None:
    who = Who()
    await enable(storage, who)
    text = "Lighthouse keeper logbook entry twelve."
    candidate_id = (await capture(storage, who, text))["candidate_id"]
    record_id = (await admit(storage, who, candidate_id))["record_id"]
    await storage.stub.Forget(transition_request(who, "engram_memory_forget", record_id))
    redis = aioredis.Redis.from_url(redis_url)
    try:
        messages = await queued(redis, storage.settings.task_queue, 3)  # candidate key + record key + invalidation
        names = sorted(m["headers"]["task"] for m in messages)
        assert names == sorted([DESTROY_KEY, DESTROY_KEY, INVALIDATE_PROJECTION])
        for message in messages:
            args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
            assert kwargs == {} and len(args) == 1 and args[0].startswith("obx_")
        raw = b"".join(await redis.lrange(storage.settings.task_queue, 0, -1))
        assert b"Lighthouse" not in raw and who.tenant.encode() not in raw
        rows = [row async for row in storage.deps.store.outbox.find({"state": "sent"})]
        assert {row["object_id"] for row in rows} >= {candidate_id, record_id}
    finally:
        await redis.delete(storage.settings.task_queue)
        await redis.aclose()
