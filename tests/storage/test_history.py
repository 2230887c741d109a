"""History for audits through the AdminService: a record's states over time (with its
candidate's events and who moved it), and a scope's hash chain walked and verified — and where
it breaks when an event is altered."""

from __future__ import annotations

import json

from engram_api.admin.v1 import admin_pb2
from storage_service.store import Scope
from tests.storage.helpers import BEARER, Storage, Who, accepted_record, enable, rpc_code



async def history(storage: Storage, who: Who, object_id: str) -> dict:
    reply = await storage.admin.ObjectHistory(admin_pb2.ObjectHistoryRequest(scope=who.scope, object_id=object_id),
                                              metadata=BEARER)
    return json.loads(reply.value_json)


async def verify(storage: Storage, who: Who) -> dict:
    reply = await storage.admin.VerifyJournal(admin_pb2.VerifyJournalRequest(scope=who.scope), metadata=BEARER)
    return json.loads(reply.value_json)


async def test_a_records_states_over_time(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id, record_id = await accepted_record(storage, who, "A record with a past.")
    for operation in ("dispute", "resolve_dispute"):
        await storage.admin.TransitionRecord(admin_pb2.TransitionRecordRequest(
            scope=who.scope, record_id=record_id, operation=operation, reason_ref="ticket:h"), metadata=BEARER)
    seen = await history(storage, who, record_id)
    assert seen["state"] == "accepted_current"
    steps = [(e["operation"], e["from_state"], e["to_state"], e["actor"]) for e in seen["events"]]
    assert steps == [("capture", "", "pending", "agent"), ("accept", "pending", "accepted_current", "worker"),
                     ("dispute", "accepted_current", "accepted_disputed", "operator"),
                     ("resolve_dispute", "accepted_disputed", "accepted_current", "operator")]
    assert [int(e["cursor"]) for e in seen["events"]] == sorted(int(e["cursor"]) for e in seen["events"])
    assert all(e["event_digest"].startswith("sha256:") for e in seen["events"])
    assert "A record with a past" not in json.dumps(seen)
    assert (await history(storage, who, candidate_id))["state"] == "accepted"
    assert await rpc_code(storage.admin.ObjectHistory(admin_pb2.ObjectHistoryRequest(
        scope=Who().scope, object_id=record_id), metadata=BEARER)) == "NOT_FOUND"


async def test_the_chain_verifies_and_an_altered_event_is_found(storage: Storage) -> None:
    who = Who()
    assert await enable(storage, who) == 1  # the policy change is event 1
    for i in range(3):
        await accepted_record(storage, who, f"Chained event source {i}.")
    intact = await verify(storage, who)
    assert intact == {"ok": True, "events": 7, "head": 7}
    await storage.deps.store.journal.update_one({"scope": Scope(who.tenant, who.workspace).key, "cursor": 5},
                                                {"$set": {"to_state": "rejected"}})
    broken = await verify(storage, who)
    assert broken == {"ok": False, "events": 4, "head": 7, "first_bad_cursor": 5, "problem": "digest"}
    empty = await verify(storage, Who())
    assert empty == {"ok": True, "events": 0, "head": 0}
