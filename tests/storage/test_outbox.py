"""The outbox relay publishes effects to Celery over the real Redis broker, ids only."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import datetime, timezone

import redis.asyncio as aioredis

from engram_api.storage.v1 import storage_pb2
from engram_core.taskq import DECIDE_ADMISSION, DESTROY_KEY, INVALIDATE_PROJECTION, decision_task_id, make_celery, redis_prefix
from storage_service.outbox import Relay
from tests.storage.helpers import Storage, Who, admit, begin_request, capture, enable, transition_request


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
    queue = redis_prefix(storage.settings.deployment) + storage.settings.task_queue
    try:
        messages = await queued(redis, queue, 3)  # candidate key + record key + invalidation
        names = sorted(m["headers"]["task"] for m in messages)
        assert names == sorted([DESTROY_KEY, DESTROY_KEY, INVALIDATE_PROJECTION])
        for message in messages:
            args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
            assert kwargs == {} and len(args) == 1 and args[0].startswith("obx_")
        raw = b"".join(await redis.lrange(queue, 0, -1))
        assert b"Lighthouse" not in raw and who.tenant.encode() not in raw
        rows = [row async for row in storage.deps.store.outbox.find({"state": "sent"})]
        assert {row["object_id"] for row in rows} >= {candidate_id, record_id}
    finally:
        await redis.delete(queue)
        await redis.aclose()


async def test_a_decision_is_owed_until_it_is_recorded(storage: Storage, redis_url: str) -> None:
    """BeginAdmission writes the decision's outbox row (the admission service publishes first);
    the relay publishes it again only when no decision is recorded by its due time, under the
    one task id every delivery of that decision shares; the commit deletes it."""
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "Tide table for the north harbour."))["candidate_id"]
    begun = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    store = storage.deps.store
    candidate = await store.candidates.find_one({"_id": candidate_id})
    row = await store.outbox.find_one({"_id": candidate["decide_outbox_id"]})
    assert row["task"] == DECIDE_ADMISSION and row["arg"] == begun.request_id
    assert row["state"] == "sent" and row["attempts"] == 1
    assert row["next_attempt_at"] > datetime.now(timezone.utc)  # not before its backstop delay

    relay = Relay(store, make_celery(storage.settings), interval=1, resend_after=5, max_attempts=3)
    await store.outbox.update_one({"_id": row["_id"]}, {"$set": {"next_attempt_at": datetime.now(timezone.utc)}})
    redis = aioredis.Redis.from_url(redis_url)
    queue = redis_prefix(storage.settings.deployment) + storage.settings.task_queue
    try:
        await redis.delete(queue)
        await relay.relay_once()
        mine = [m for m in await queued(redis, queue, 1) if m["headers"]["id"] == decision_task_id(begun.request_id)]
        assert mine and all(m["headers"]["task"] == DECIDE_ADMISSION for m in mine)
        assert all(json.loads(base64.b64decode(m["body"]))[0] == [begun.request_id] for m in mine)
        republished = await store.outbox.find_one({"_id": row["_id"]})
        assert republished["attempts"] >= 2 and republished["state"] == "sent"

        await admit(storage, who, candidate_id)
        # Decided: the row is deleted with the decision (nothing is owed, nothing reads it).
        assert await store.outbox.find_one({"_id": row["_id"]}) is None
        await redis.delete(queue)
        await relay.relay_once()
        assert [m for m in [json.loads(i) for i in await redis.lrange(queue, 0, -1)]
                if m["headers"]["id"] == decision_task_id(begun.request_id)] == []
    finally:
        await redis.delete(queue)
        await redis.aclose()


def test_resend_delay_doubles_up_to_its_cap() -> None:
    relay = Relay(None, None, interval=1, resend_after=10, max_attempts=10, resend_max=300)  # type: ignore[arg-type]
    delays = [relay.resend_delay(n).total_seconds() for n in range(8)]
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]


async def test_an_unfinished_erasure_is_published_again_and_a_finished_one_is_not(storage: Storage, redis_url: str) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "Keeper's note: lamp oil delivered."))["candidate_id"]
    record_id = (await admit(storage, who, candidate_id))["record_id"]
    store = storage.deps.store
    relay = Relay(store, make_celery(storage.settings), interval=1, resend_after=5, max_attempts=3)
    row = await store.outbox.find_one({"object_id": candidate_id, "task": DESTROY_KEY})
    await relay.relay_once()
    sent = await store.outbox.find_one({"_id": row["_id"]})
    assert sent["state"] in ("sent", "done")
    await store.outbox.update_one({"_id": row["_id"]}, {"$set": {"state": "sent", "next_attempt_at": datetime.now(timezone.utc)}})
    before = (await store.outbox.find_one({"_id": row["_id"]}))["attempts"]
    await relay.relay_once()
    assert (await store.outbox.find_one({"_id": row["_id"]}))["attempts"] > before
    # Its effect recorded (the key destroyed): never published again.
    await storage.stub.DestroyKey(storage_pb2.DestroyKeyRequest(outbox_id=row["_id"]))
    await store.outbox.update_one({"_id": row["_id"]}, {"$set": {"next_attempt_at": datetime.now(timezone.utc)}})
    await relay.relay_once()
    attempts = (await store.outbox.find_one({"_id": row["_id"]}))["attempts"]
    await relay.relay_once()
    final = await store.outbox.find_one({"_id": row["_id"]})
    assert final["state"] == "done" and final["attempts"] == attempts
    redis = aioredis.Redis.from_url(redis_url)
    try:
        await redis.delete(redis_prefix(storage.settings.deployment) + storage.settings.task_queue)
    finally:
        await redis.aclose()
    assert record_id
