"""kill -9 of each process of the stack under a burst of captures and admissions: after the
supervisor restarts it, every acknowledged capture and admission is present, same-key retries
return the first answer, every admitted record is searchable and nothing stays pending."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import pytest
from pymongo import MongoClient

from engram_cli.spawn import SpawnedStack
from engram_hostkit.examples import make_request_admission_args, make_search_args
from tests.faults.burst import PURPOSE, Burst, Reconnecting, restarted

# Every process of the local stack: the datastores first, then the services.
TARGETS = ("mongodb", "redis", "worker", "storage", "search", "admission", "gateway")
BURST_SIZE = 16
KILL_AFTER = 4
RECOVERY_SECONDS = 90.0


async def verify(stack: SpawnedStack, burst: Burst) -> None:
    client = Reconnecting(str(stack.host_file), burst)
    deadline = time.monotonic() + RECOVERY_SECONDS
    try:
        for item in burst.items:
            assert item.captured is not None and item.admitted is not None
            replay = await client.until_ok("engram_memory_capture", item.capture_args, deadline)
            assert replay["candidate_id"] == item.captured["candidate_id"]
            assert replay["status"] == "duplicate_exact"
            args = make_request_admission_args(item.captured["candidate_id"], item.admission_key)
            again = await client.until_ok("engram_memory_request_admission", args, deadline)
            assert again["replayed"] is True and again["outcome"] == item.admitted["outcome"]
            assert item.admitted["outcome"]["status"] == "accepted"
        for item in burst.items:
            found = await client.until_ok("engram_memory_search", make_search_args(item.token, PURPOSE), deadline)
            ids = [packet["record"]["record_id"] for packet in found["records"]]
            assert item.admitted["outcome"]["record_id"] in ids, item.token
    finally:
        await client.close()


def nothing_pending(stack: SpawnedStack, burst: Burst | None = None) -> None:
    """No candidate waits for a decision and no decision task is still owed; with ``burst``,
    each of its candidates has exactly one decision journal event and its data key destroyed
    (with the decision, in its transaction)."""
    with MongoClient(stack.state()["mongo_url"], serverSelectionTimeoutMS=5000) as mongo:
        db = mongo[os.environ.get("ENGRAM_MONGO_DB", "engram")]
        waiting = db.candidates.count_documents({"admission_request_id": {"$exists": True}, "outcome": {"$exists": False}})
        owed = db.outbox.count_documents({"task": "engram.admission.decide", "state": {"$ne": "done"}})
        assert (waiting, owed) == (0, 0)
        if burst is None:
            return
        ids = [item.captured["candidate_id"] for item in burst.items if item.captured]
        decisions = {cid: db.journal.count_documents({"operation": {"$in": ["accept", "reject", "hold", "duplicate"]},
                                                      "binding.candidate_id": cid}) for cid in ids}
        assert set(decisions.values()) == {1}, decisions
        destroyed = db.data_keys.count_documents({"_id": {"$in": ids}, "receipt_digest": {"$exists": True},
                                                  "wrapped": {"$exists": False}})
        assert destroyed == len(ids), f"{len(ids) - destroyed} decided candidates kept their data key"


@pytest.mark.parametrize("target", TARGETS)
async def test_kill_nine_under_burst_loses_nothing(owned_stack: SpawnedStack, target: str) -> None:
    burst = Burst(str(owned_stack.host_file), tag=f"{target[:3]}{uuid.uuid4().hex[:6]}", size=BURST_SIZE)
    victim = owned_stack.pids()[target]
    killed_at: list[float] = []

    async def kill_midway(done: int) -> None:
        if done == KILL_AFTER and not killed_at:
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.monotonic())

    await burst.run(RECOVERY_SECONDS, on_progress=kill_midway)
    assert killed_at, "the burst ended before the kill"
    await asyncio.to_thread(restarted, owned_stack, target, victim)
    await verify(owned_stack, burst)
    await asyncio.to_thread(nothing_pending, owned_stack, burst)
    print(f"\n{target}: killed after {KILL_AFTER}/{BURST_SIZE}, recovered in "
          f"{time.monotonic() - killed_at[0]:.1f}s; retries {dict(sorted(burst.retries.items()))}")
