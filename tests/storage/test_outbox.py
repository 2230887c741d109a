"""The outbox relay publishes effects to Celery over the real Redis broker, ids only."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timezone

import redis.asyncio as aioredis

from engram_api.storage.v1 import storage_pb2
from engram_core.taskq import DECIDE_ADMISSION, DESTROY_KEY, INVALIDATE_PROJECTION, decision_task_id, make_celery, redis_prefix
from engram_api.admin.v1 import admin_pb2
from storage_service.outbox import Relay, new_outbox_id
from storage_service.store import Store
from tests.storage.helpers import BEARER, Storage, Who, admit, begin_request, capture, enable, transition_request


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
    # The candidate's key went with the decision (same transaction): only the forget's effects
    # are owed to tasks.
    assert await storage.deps.vault.destroyed(candidate_id)
    await storage.stub.Forget(transition_request(who, "engram_memory_forget", record_id))
    redis = aioredis.Redis.from_url(redis_url)
    queue = redis_prefix(storage.settings.deployment) + storage.settings.task_queue
    try:
        messages = await queued(redis, queue, 2)  # record key + invalidation
        names = sorted(m["headers"]["task"] for m in messages)
        assert names == sorted([DESTROY_KEY, INVALIDATE_PROJECTION])
        for message in messages:
            args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
            assert kwargs == {} and len(args) == 1 and args[0].startswith("obx_")
        raw = b"".join(await redis.lrange(queue, 0, -1))
        assert b"Lighthouse" not in raw and who.tenant.encode() not in raw
        rows = [row async for row in storage.deps.store.outbox.find({"state": "sent"})]
        assert {row["object_id"] for row in rows} >= {record_id}
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
        deadline = asyncio.get_running_loop().time() + 5
        while not (mine := [m for m in [json.loads(i) for i in await redis.lrange(queue, 0, -1)]
                            if m["headers"]["id"] == decision_task_id(begun.request_id)]):
            assert asyncio.get_running_loop().time() < deadline, "not republished"
            await asyncio.sleep(0.05)
        assert all(m["headers"]["task"] == DECIDE_ADMISSION for m in mine)
        assert all(json.loads(base64.b64decode(m["body"]))[0] == [begun.request_id] for m in mine)
        # This relay or the storage server's own published it (whichever claimed the row first).
        deadline = asyncio.get_running_loop().time() + 5
        while (republished := await store.outbox.find_one({"_id": row["_id"]}))["attempts"] < 2:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        assert republished["state"] == "sent"

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
    await storage.stub.Withdraw(transition_request(who, "engram_memory_withdraw", candidate_id))
    store = storage.deps.store
    relay = Relay(store, make_celery(storage.settings), interval=1, resend_after=5, max_attempts=3)
    row = await store.outbox.find_one({"object_id": candidate_id, "task": DESTROY_KEY})
    for _ in range(100):  # this relay, or the storage process's own (woken by the commit), sends it
        await relay.relay_once()
        sent = await store.outbox.find_one({"_id": row["_id"]})
        if sent["state"] in ("sent", "done"):
            break
        await asyncio.sleep(0.05)
    assert sent["state"] in ("sent", "done")
    await store.outbox.update_one({"_id": row["_id"]}, {"$set": {"state": "sent", "next_attempt_at": datetime.now(timezone.utc)}})
    before = (await store.outbox.find_one({"_id": row["_id"]}))["attempts"]
    for _ in range(100):  # sent again: by this relay, or by the storage process's own if it came first
        await relay.relay_once()
        if (await store.outbox.find_one({"_id": row["_id"]}))["attempts"] > before:
            break
        await asyncio.sleep(0.05)
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


@asynccontextmanager
async def private_outbox(storage: Storage, mongo_url: str) -> AsyncIterator[tuple[Store, dict]]:
    """A due outbox row in a database of its own: the storage fixture's own relay (which scans
    every due row of its database) cannot take it, so the relays a test makes are the only ones."""
    store = Store.connect(mongo_url, f"relay_{uuid.uuid4().hex[:10]}")
    now = datetime.now(timezone.utc)
    row = {"_id": new_outbox_id(), "task": DESTROY_KEY, "scope": "sha256:" + "0" * 64, "tenant": "t", "workspace": "w",
           "object_id": "cand_x", "state": "pending", "attempts": 0, "created_at": now, "next_attempt_at": now}
    await store.outbox.insert_one(row)
    try:
        yield store, row
    finally:
        await store.client.drop_database(store.db.name)
        await store.close()


def published_for(messages: list[bytes], outbox_id: str) -> int:
    return sum(1 for m in messages if json.loads(base64.b64decode(json.loads(m)["body"]))[0] == [outbox_id])


async def test_one_relay_of_several_publishes_each_due_row(storage: Storage, redis_url: str, mongo_url: str) -> None:
    """Every storage replica runs a relay: a row is claimed (a conditional update with a lease)
    before it is published, so concurrent relays publish each delivery once."""
    celery = make_celery(storage.settings)
    redis = aioredis.Redis.from_url(redis_url)
    queue = redis_prefix(storage.settings.deployment) + storage.settings.task_queue
    async with private_outbox(storage, mongo_url) as (store, row):
        try:
            relays = [Relay(store, celery, interval=1, resend_after=5, max_attempts=5) for _ in range(4)]
            published = await asyncio.gather(*(relay.relay_once() for relay in relays))
            assert sum(published) == 1
            assert published_for(await redis.lrange(queue, 0, -1), row["_id"]) == 1
            after = await store.outbox.find_one({"_id": row["_id"]})
            assert (after["state"], after["attempts"]) == ("sent", 1) and "lease_owner" not in after
        finally:
            await redis.delete(queue)
            await redis.aclose()


async def test_a_claim_left_by_a_dead_relay_expires(storage: Storage, redis_url: str, mongo_url: str) -> None:
    celery = make_celery(storage.settings)
    redis = aioredis.Redis.from_url(redis_url)
    queue = redis_prefix(storage.settings.deployment) + storage.settings.task_queue
    async with private_outbox(storage, mongo_url) as (store, row):
        try:
            dying = Relay(store, celery, interval=1, resend_after=5, max_attempts=5, lease=0.3)
            assert await dying._claim(row, datetime.now(timezone.utc))  # claimed, then died before publishing
            survivor = Relay(store, celery, interval=1, resend_after=5, max_attempts=5)
            assert await survivor.relay_once() == 0  # still leased
            await asyncio.sleep(0.4)
            assert await survivor.relay_once() == 1
            assert published_for(await redis.lrange(queue, 0, -1), row["_id"]) == 1
        finally:
            await redis.delete(queue)
            await redis.aclose()


async def test_a_decision_no_delivery_could_make_is_held_for_an_operator(storage: Storage) -> None:
    """A poison candidate (its task fails or kills its worker every time) ends held, reason
    decision_failed, once the relay's deliveries are spent (the storage server's own relay
    here): listed for adjudication, never left pending, and request_admission answers it."""
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "A candidate no worker survives."))["candidate_id"]
    await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    store = storage.deps.store
    row_id = (await store.candidates.find_one({"_id": candidate_id}))["decide_outbox_id"]
    await store.outbox.update_one({"_id": row_id}, {"$set": {"attempts": storage.settings.relay_max_attempts,
                                                             "next_attempt_at": datetime.now(timezone.utc)}})
    deadline = asyncio.get_running_loop().time() + 10
    while (candidate := await store.candidates.find_one({"_id": candidate_id})).get("outcome") is None:
        assert asyncio.get_running_loop().time() < deadline, "not held"
        await asyncio.sleep(0.05)
    assert candidate["state"] == "pending" and candidate["decision_reason"] == "decision_failed"
    assert json.loads(candidate["outcome"])["status"] == "pending_adjudication"
    assert await store.outbox.find_one({"_id": row_id}) is None  # nothing owed any more
    again = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    assert json.loads(again.outcome_json)["status"] == "pending_adjudication"
    listed = await storage.admin.ListPending(admin_pb2.ListPendingRequest(scope=who.scope, limit=10), metadata=BEARER)
    assert [(c["candidate_id"], c["reason"]) for c in json.loads(listed.candidates_json)] == [(candidate_id, "decision_failed")]


async def test_only_the_call_that_made_the_request_publishes_it(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "Chart correction for the east channel."))["candidate_id"]
    first = await storage.stub.BeginAdmission(begin_request(who, candidate_id, idem="adm-first-0000001"))
    retry = await storage.stub.BeginAdmission(begin_request(who, candidate_id, idem="adm-first-0000001"))
    other_key = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    assert first.fresh and not retry.fresh and not other_key.fresh
    assert first.request_id == retry.request_id == other_key.request_id


async def test_a_publish_that_fails_gives_the_claim_back(storage: Storage, mongo_url: str) -> None:
    """A broker that is away fails the pass, and the row is due again at once (not after the
    lease): the next pass after the broker is back publishes it."""
    from engram_core.settings import TaskQueueSettings

    unreachable = make_celery(TaskQueueSettings(redis_url="redis://127.0.0.1:1/0", deployment=storage.settings.deployment))
    unreachable.conf.task_publish_retry = False
    async with private_outbox(storage, mongo_url) as (store, row):
        relay = Relay(store, unreachable, interval=1, resend_after=5, max_attempts=5)
        try:
            await asyncio.wait_for(relay.relay_once(), timeout=30)
        except Exception:  # noqa: BLE001 - whatever the client raises for a refused connection
            pass
        after = await store.outbox.find_one({"_id": row["_id"]})
        assert "lease_owner" not in after and after["attempts"] == 0
        assert after["next_attempt_at"] <= datetime.now(timezone.utc).replace(tzinfo=after["next_attempt_at"].tzinfo)
