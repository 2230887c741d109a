"""The expiry sweep (SPEC §6 ``expire`` by the sweeper) on storage's injectable clock: a due
record becomes ``expired`` with one journal event by the sweeper, its derivative rule decides
its data key, it leaves every read (and reads leave it out before the sweep), the worker's task
drives the RPC in batches, and a record moved meanwhile is skipped for good."""

from __future__ import annotations

import asyncio
import json

from engram_api.storage.v1 import storage_pb2
from admission_worker.tasks import TaskClients, run_expiry
from engram_core.timefmt import format_instant, now_ms
from engram_core.transport import Transport
from engram_core.taskq import DESTROY_KEY, INVALIDATE_PROJECTION
from storage_service.vault import RECORD
from storage_service.store import Scope
from tests.storage.helpers import (BEARER, Storage, Who, accepted_record, capture, admit, enable, rpc_code,
                                   transition_request)
from engram_api.admin.v1 import admin_pb2

HOUR = 3600 * 1000


async def expiring(storage: Storage, who: Who, text: str, in_ms: int, rule: str = "make-ineligible") -> str:
    retention = {"derivative_rule": rule, "expires_at": format_instant(now_ms() + in_ms)}
    candidate_id = (await capture(storage, who, text, retention=retention))["candidate_id"]
    outcome = await admit(storage, who, candidate_id)
    assert outcome["status"] == "accepted", outcome
    return outcome["record_id"]


def at(storage: Storage, ms: int) -> None:
    """Storage's clock set ``ms`` from now (the sweep and reads follow it)."""
    base = now_ms()
    storage.deps.clock = lambda: base + ms


async def sweep(storage: Storage, limit: int = 1000) -> storage_pb2.SweepExpiredResponse:
    return await storage.stub.SweepExpired(storage_pb2.SweepExpiredRequest(limit=limit))


async def test_a_due_record_is_expired_by_the_sweeper_and_its_key_destroyed(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    record_id = await expiring(storage, who, "The ferry timetable changes at the end of the month.", HOUR)
    _, kept_id = await accepted_record(storage, who, "A record without an expiry.")
    get = storage_pb2.GetRecordRequest(caller=who.caller, record_id=record_id)
    await storage.stub.GetRecord(get)  # readable before
    try:
        at(storage, HOUR - 1000)
        await sweep(storage)  # (the test database is shared: others' records may be due)
        assert (await storage.deps.store.records.find_one({"_id": record_id}))["state"] == "accepted_current"
        at(storage, HOUR + 1)
        # Between sweeps a read already leaves it out.
        assert await rpc_code(storage.stub.GetRecord(get)) == "NOT_FOUND"
        swept = await sweep(storage)
        assert swept.expired >= 1 and not swept.more
        doc = await storage.deps.store.records.find_one({"_id": record_id})
        assert doc["state"] == "expired" and "expires_ms" not in doc
        event = await storage.deps.store.journal.find_one({"scope": Scope(who.tenant, who.workspace).key,
                                                           "object_id": record_id, "operation": "expire"})
        assert (event["from_state"], event["to_state"], event["binding"]["actor"]) == (
            "accepted_current", "expired", "sweeper")
        tasks = sorted([row["task"] async for row in storage.deps.store.outbox.find({"object_id": record_id})])
        assert tasks == sorted([DESTROY_KEY, INVALIDATE_PROJECTION])
        await sweep(storage)  # idempotent: nothing is expired twice
        assert await storage.deps.store.journal.count_documents({"object_id": record_id, "operation": "expire"}) == 1
        await storage.stub.GetRecord(storage_pb2.GetRecordRequest(caller=who.caller, record_id=kept_id))
        # A forget of the expired record now reports where it was.
        forgot = json.loads((await storage.stub.Forget(transition_request(who, "engram_memory_forget",
                                                                           record_id))).value_json)
        assert forgot["receipt"]["from_state"] == "expired"
    finally:
        storage.deps.clock = now_ms


async def test_retain_keeps_the_key_and_still_leaves_every_read(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, retain_allowed=True)
    record_id = await expiring(storage, who, "Retained past its expiry for audit.", HOUR, rule="retain")
    try:
        at(storage, HOUR + 1)
        await sweep(storage)
        doc = await storage.deps.store.records.find_one({"_id": record_id})
        assert doc["state"] == "expired" and doc["derivative_rule"] == "retain"
        tasks = [row["task"] async for row in storage.deps.store.outbox.find({"object_id": record_id})]
        assert tasks == [INVALIDATE_PROJECTION]  # no key destruction: the content stays recoverable
        content = json.loads(await storage.deps.vault.open(Scope(who.tenant, who.workspace), record_id, RECORD,
                                                           doc["blob"]))
        assert content["components"][0]["text"] == "Retained past its expiry for audit."
        assert await rpc_code(storage.stub.GetRecord(storage_pb2.GetRecordRequest(
            caller=who.caller, record_id=record_id))) == "NOT_FOUND"
    finally:
        storage.deps.clock = now_ms


async def test_the_task_sweeps_in_batches_until_nothing_is_due(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    ids = await asyncio.gather(*(expiring(storage, who, f"Batch expiry note {i}.", HOUR) for i in range(5)))
    try:
        at(storage, HOUR + 1)
        first = await sweep(storage, limit=2)
        assert (first.expired, first.more) == (2, True)
        assert await rpc_code(sweep(storage, limit=1001)) == "INVALID_SCHEMA"
        clients = TaskClients.connect(Transport.plaintext(), storage.addr, "127.0.0.1:1", timeout=10)
        assert int(await asyncio.to_thread(run_expiry, clients)) >= 3
        states = {doc["state"] async for doc in storage.deps.store.records.find({"_id": {"$in": list(ids)}})}
        assert states == {"expired"}
    finally:
        storage.deps.clock = now_ms


async def test_a_record_moved_out_of_reach_is_skipped_for_good(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    record_id = await expiring(storage, who, "Invalidated before it was due.", HOUR)
    await storage.admin.TransitionRecord(admin_pb2.TransitionRecordRequest(
        scope=who.scope, record_id=record_id, operation="trust_invalidate", reason_ref="ticket:1"), metadata=BEARER)
    doc = await storage.deps.store.records.find_one({"_id": record_id})
    assert doc["state"] == "trust_invalid" and "expires_ms" not in doc  # the engine took it off the index
    # A record written before that rule (its expiry still indexed) is skipped, then dropped.
    await storage.deps.store.records.update_one({"_id": record_id}, {"$set": {"expires_ms": now_ms() + HOUR}})
    try:
        at(storage, HOUR + 1)
        swept = await sweep(storage)
        assert swept.skipped >= 1
        assert "expires_ms" not in await storage.deps.store.records.find_one({"_id": record_id})
        assert (await storage.deps.store.records.find_one({"_id": record_id}))["state"] == "trust_invalid"
    finally:
        storage.deps.clock = now_ms
