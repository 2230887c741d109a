"""Exactly-once admission decisions against the real stack (Celery worker, Redis, the
MongoDB-protocol server): duplicate deliveries and concurrent same-key calls while the worker
is stopped, Redis restarted with decision tasks queued, and poison tasks. Each shows one
decision journal event per candidate, nothing left pending, and every same-key call
converging on the first answer."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from typing import Any

import pytest
import redis
from pymongo import MongoClient

from admission_worker.tasks import MAX_DECISION_STARTS
from engram_cli.spawn import SpawnedStack
from engram_cli.stackstate import deployment_for
from engram_core.settings import TaskQueueSettings
from engram_core.taskq import DECIDE_ADMISSION, DESTROY_KEY, decision_task_id, make_celery
from engram_hostkit import HostFile
from engram_hostkit.examples import make_capture_args, make_request_admission_args
from tests.faults.burst import PURPOSE, Burst, Reconnecting
from tests.faults.test_kill_under_burst import restarted

DECISION_OPERATIONS = ("accept", "reject", "hold", "duplicate")
SETTLE_SECONDS = 90.0


@pytest.fixture(scope="module")
def stack(owned_stack: SpawnedStack) -> SpawnedStack:
    """This module's own stack (tests/faults/conftest.py: owned datastores, fast redelivery)."""
    return owned_stack


def mongo_db(stack: SpawnedStack) -> Any:
    client = MongoClient(stack.state()["mongo_url"], serverSelectionTimeoutMS=5000)
    return client, client[os.environ.get("ENGRAM_MONGO_DB", "engram")]


def decision_events(stack: SpawnedStack, candidate_id: str) -> int:
    client, db = mongo_db(stack)
    with client:
        return db.journal.count_documents({"operation": {"$in": list(DECISION_OPERATIONS)},
                                           "binding.candidate_id": candidate_id})


def nothing_owed(stack: SpawnedStack, candidate_ids: list[str]) -> None:
    client, db = mongo_db(stack)
    with client:
        undecided = db.candidates.count_documents({"_id": {"$in": candidate_ids}, "outcome": {"$exists": False}})
        owed = db.outbox.count_documents({"task": DECIDE_ADMISSION, "object_id": {"$in": candidate_ids}})
    assert (undecided, owed) == (0, 0)


def erasure_completes(stack: SpawnedStack, candidate_ids: list[str], timeout: float = 60.0) -> None:
    """Every decided (not held) candidate's data key is destroyed — in its decision's own
    transaction, so with the decision and never owed to a task: a receipt on each key, no
    wrapped key left, no erasure row."""
    deadline = time.monotonic() + timeout
    client, db = mongo_db(stack)
    with client:
        while True:
            keys = list(db.data_keys.find({"_id": {"$in": candidate_ids}}, {"receipt_digest": 1, "wrapped": 1}))
            destroyed = [k for k in keys if "receipt_digest" in k and "wrapped" not in k]
            if len(destroyed) == len(candidate_ids):
                assert db.outbox.count_documents({"task": DESTROY_KEY, "object_id": {"$in": candidate_ids}}) == 0
                return
            assert time.monotonic() < deadline, f"erasure not complete: {len(destroyed)} of {len(candidate_ids)}"
            time.sleep(0.1)


def celery_of(stack: SpawnedStack) -> Any:
    settings = TaskQueueSettings(redis_url=stack.state()["redis_url"], deployment=deployment_for(stack.state_dir))
    return make_celery(settings)


def request_ids(stack: SpawnedStack, candidate_ids: list[str], timeout: float = 30.0) -> dict[str, str]:
    """Each candidate's admission request id, once BeginAdmission has made it."""
    deadline = time.monotonic() + timeout
    client, db = mongo_db(stack)
    with client:
        while True:
            found = {d["_id"]: d["admission_request_id"] for d in db.candidates.find(
                {"_id": {"$in": candidate_ids}, "admission_request_id": {"$exists": True}})}
            if len(found) == len(candidate_ids):
                return found
            assert time.monotonic() < deadline, "admission requests not begun"
            time.sleep(0.05)


def starts(stack: SpawnedStack, request_id: str) -> int:
    app = celery_of(stack)
    key = app.backend.get_key_for_task(decision_task_id(request_id)) + b".starts"
    with redis.Redis.from_url(stack.state()["redis_url"]) as client:
        return int(client.get(key) or 0)


class Drill:
    """One test's client, its retry notes and a tag that keeps its keys apart."""

    def __init__(self, stack: SpawnedStack) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.burst = Burst(str(stack.host_file), tag=self.tag, size=0)
        self.client = Reconnecting(str(stack.host_file), self.burst)

    def admit_later(self, candidate_id: str, key: str) -> asyncio.Task[dict[str, Any]]:
        """request_admission with ``key``, retried until acknowledged, as a task of its own."""
        return asyncio.create_task(self.client.until_ok(
            "engram_memory_request_admission", make_request_admission_args(candidate_id, key),
            time.monotonic() + SETTLE_SECONDS))


async def captured(client: Reconnecting, tag: str, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + SETTLE_SECONDS
    items = []
    for i in range(n):
        args = make_capture_args(idempotency_key=f"dec-cap-{tag}-{i:04d}", text=f"Decision drill {tag} {i}: pilot boat at six.",
                                 purpose_ref=PURPOSE)
        items.append(await client.until_ok("engram_memory_capture", args, deadline))
    return items


async def test_duplicate_deliveries_and_concurrent_same_key_calls_make_one_decision(stack: SpawnedStack) -> None:
    drill = Drill(stack)
    tag, burst, client = drill.tag, drill.burst, drill.client
    candidates = [c["candidate_id"] for c in await captured(client, tag, 3)]
    worker = stack.pids()["worker"]
    os.kill(worker, signal.SIGSTOP)  # decisions queue up, calls wait
    try:
        calls = {cid: [drill.admit_later(cid, f"dec-adm-{tag}-{n}") for _ in range(2)]  # two same-key calls at once
                 for n, cid in enumerate(candidates)}
        requests = await asyncio.to_thread(request_ids, stack, candidates)
        app = celery_of(stack)
        for request_id in requests.values():
            for _ in range(3):  # duplicate deliveries of the same decision
                await asyncio.to_thread(app.send_task, DECIDE_ADMISSION, args=[request_id],
                                        task_id=decision_task_id(request_id))
    finally:
        os.kill(worker, signal.SIGCONT)
    answers = {cid: await asyncio.gather(*tasks) for cid, tasks in calls.items()}
    for cid, (first, second) in answers.items():
        assert first["outcome"] == second["outcome"] and first["outcome"]["status"] == "accepted"
        again = await client.until_ok("engram_memory_request_admission",
                                      make_request_admission_args(cid, f"dec-adm-{tag}-{candidates.index(cid)}"),
                                      time.monotonic() + SETTLE_SECONDS)
        assert again["replayed"] is True and again["outcome"] == first["outcome"]
    await asyncio.sleep(1.0)  # let the duplicates run out: each finds the decision and stops
    for cid, request_id in requests.items():
        assert decision_events(stack, cid) == 1
        assert starts(stack, request_id) >= 2  # the duplicates were delivered and started
    nothing_owed(stack, candidates)
    await asyncio.to_thread(erasure_completes, stack, candidates)
    print(f"\nduplicates: {dict(sorted(burst.retries.items()))}, starts "
          f"{[starts(stack, r) for r in requests.values()]}")


async def test_redis_restarted_with_decisions_queued_loses_none(stack: SpawnedStack) -> None:
    drill = Drill(stack)
    tag, burst, client = drill.tag, drill.burst, drill.client
    candidates = [c["candidate_id"] for c in await captured(client, tag, 4)]
    worker = stack.pids()["worker"]
    os.kill(worker, signal.SIGSTOP)
    try:
        calls = [drill.admit_later(cid, f"dec-redis-{tag}-{n}") for n, cid in enumerate(candidates)]
        await asyncio.to_thread(request_ids, stack, candidates)
        await asyncio.sleep(0.5)  # the tasks are on the queue (or taken by the stopped worker)
        victim = stack.pids()["redis"]
        os.kill(victim, signal.SIGKILL)
        await asyncio.to_thread(restarted, stack, "redis", victim)
    finally:
        os.kill(worker, signal.SIGCONT)
    answers = await asyncio.gather(*calls)
    assert all(a["outcome"]["status"] == "accepted" for a in answers)
    for n, cid in enumerate(candidates):
        again = await client.until_ok("engram_memory_request_admission",
                                      make_request_admission_args(cid, f"dec-redis-{tag}-{n}"),
                                      time.monotonic() + SETTLE_SECONDS)
        assert again["outcome"] == answers[n]["outcome"]
        assert decision_events(stack, cid) == 1
    nothing_owed(stack, candidates)
    await asyncio.to_thread(erasure_completes, stack, candidates)
    print(f"\nredis restart with decisions queued: retries {dict(sorted(burst.retries.items()))}")


async def test_poison_tasks_are_held_not_retried_forever(stack: SpawnedStack) -> None:
    """A task for no request fails once and harms nothing; a candidate that fails every
    delivery (its ciphertext unreadable: BLOB_MISSING each time) is held for an operator after
    MAX_DECISION_STARTS starts (decision_failed), and the same-key call answers that."""
    drill = Drill(stack)
    tag, burst, client = drill.tag, drill.burst, drill.client
    app = celery_of(stack)
    bogus = "req_" + "a" * 26
    await asyncio.to_thread(app.send_task, DECIDE_ADMISSION, args=[bogus], task_id=decision_task_id(bogus))

    poisoned, donor = [c["candidate_id"] for c in await captured(client, tag, 2)]
    mongo, db = mongo_db(stack)
    with mongo:
        # Another candidate's ciphertext: it decrypts under neither key nor AAD of this one.
        db.candidates.update_one({"_id": poisoned}, {"$set": {"blob": db.candidates.find_one({"_id": donor})["blob"]}})
    started = time.monotonic()
    args = make_request_admission_args(poisoned, f"dec-poison-{tag}")
    held = await client.until_ok("engram_memory_request_admission", args, time.monotonic() + SETTLE_SECONDS)
    assert held["outcome"]["status"] == "pending_adjudication"
    with mongo_db(stack)[0] as mongo:
        doc = mongo[os.environ.get("ENGRAM_MONGO_DB", "engram")].candidates.find_one({"_id": poisoned})
    assert doc["decision_reason"] == "decision_failed" and doc["state"] == "pending"
    request_id = doc["admission_request_id"]
    assert starts(stack, request_id) == MAX_DECISION_STARTS + 1
    assert decision_events(stack, poisoned) == 1
    nothing_owed(stack, [poisoned])

    # The worker is healthy: the next candidate is decided as usual.
    fine = await client.until_ok("engram_memory_request_admission", make_request_admission_args(donor, f"dec-fine-{tag}"),
                                 time.monotonic() + SETTLE_SECONDS)
    assert fine["outcome"]["status"] == "accepted"
    await asyncio.to_thread(erasure_completes, stack, [donor])
    host = HostFile.load(str(stack.host_file))
    listed = stack.admin("pending", "--tenant", host.tenant, "--workspace", host.workspace, "--json")
    assert poisoned in listed.stdout and "decision_failed" in listed.stdout
    print(f"\npoison held after {time.monotonic() - started:.1f}s and {MAX_DECISION_STARTS + 1} starts; "
          f"retries {dict(sorted(burst.retries.items()))}")


async def test_a_storage_relay_dying_between_publish_and_mark_costs_only_a_duplicate(stack: SpawnedStack) -> None:
    """This test plays a storage replica whose relay claims a decision's row, publishes it and
    dies before marking it: the row stays claimed until its lease ends, the stack's own relay
    then publishes it again, and the two deliveries make one decision."""
    from storage_service.outbox import Relay, task_message
    from storage_service.store import Store

    drill = Drill(stack)
    tag, client = drill.tag, drill.client
    (candidate,) = [c["candidate_id"] for c in await captured(client, tag, 1)]
    worker = stack.pids()["worker"]
    os.kill(worker, signal.SIGSTOP)
    store = Store.connect(stack.state()["mongo_url"], os.environ.get("ENGRAM_MONGO_DB", "engram"))
    try:
        call = drill.admit_later(candidate, f"dec-relay-{tag}")
        request_id = (await asyncio.to_thread(request_ids, stack, [candidate]))[candidate]
        row = await store.outbox.find_one({"task": DECIDE_ADMISSION, "object_id": candidate})
        dying = Relay(store, celery_of(stack), interval=1, resend_after=2, max_attempts=10, lease=0.5)
        assert await dying._claim(row, row["next_attempt_at"])  # as it read the row when it was due
        task_id, arg = task_message(row)
        await asyncio.to_thread(dying._celery.send_task, DECIDE_ADMISSION, args=[arg], task_id=task_id)
        # ... and the replica dies here, before marking the row.
        deadline = time.monotonic() + 30
        while (await store.outbox.find_one({"_id": row["_id"]}))["attempts"] == row["attempts"]:
            assert time.monotonic() < deadline, "the stack's relay never took the abandoned row over"
            await asyncio.sleep(0.1)
    finally:
        os.kill(worker, signal.SIGCONT)
    answer = await call
    assert answer["outcome"]["status"] == "accepted"
    await asyncio.sleep(1.0)
    assert decision_events(stack, candidate) == 1
    assert starts(stack, request_id) >= 3  # the caller's publish, the dead relay's, the takeover
    assert await store.outbox.find_one({"_id": row["_id"]}) is None
    await store.close()
    nothing_owed(stack, [candidate])
    await asyncio.to_thread(erasure_completes, stack, [candidate])
