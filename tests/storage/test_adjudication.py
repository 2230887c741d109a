"""Adjudication through the AdminService: a candidate the worker held (pending_adjudication)
is listed with metadata only, an operator's accept or reject decides it through the worker's
own decision path, and the agent's next request_admission returns that final outcome."""

from __future__ import annotations

import json

from engram_api.admin.v1 import admin_pb2
from engram_core.taskq import DESTROY_KEY
from tests.storage.helpers import BEARER, Storage, Who, admit, begin_request, capture, enable, rpc_code

HELD = {"admission": {"mode": "require_adjudication"}}


async def held(storage: Storage, who: Who, text: str) -> str:
    candidate_id = (await capture(storage, who, text))["candidate_id"]
    assert (await admit(storage, who, candidate_id))["status"] == "pending_adjudication"
    return str(candidate_id)


async def listed(storage: Storage, who: Who, **kw: object) -> list[dict[str, str]]:
    reply = await storage.admin.ListPending(admin_pb2.ListPendingRequest(scope=who.scope, **kw), metadata=BEARER)
    return json.loads(reply.candidates_json)


async def adjudicate(storage: Storage, who: Who, candidate_id: str, decision: str) -> dict[str, str]:
    reply = await storage.admin.Adjudicate(admin_pb2.AdjudicateRequest(
        scope=who.scope, candidate_id=candidate_id, decision=decision, reason_ref="ticket:adj-1"), metadata=BEARER)
    return json.loads(reply.outcome_json)


async def test_a_held_candidate_is_unblocked_by_the_operator(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, **HELD)
    secret_text = "Held for a human: the quarterly plan draft."
    candidate_id = await held(storage, who, secret_text)
    # Stuck until an operator decides: every retry replays the hold.
    again = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    assert json.loads(again.outcome_json)["status"] == "pending_adjudication"
    pending = await listed(storage, who)
    assert [p["candidate_id"] for p in pending] == [candidate_id]
    assert pending[0]["reason"] == "policy" and pending[0]["record_digest"].startswith("sha256:")
    assert "quarterly" not in json.dumps(pending)  # metadata only
    assert not await storage.deps.vault.destroyed(candidate_id)  # held: kept for the operator
    outcome = await adjudicate(storage, who, candidate_id, "accept")
    assert outcome["status"] == "accepted" and outcome["record_id"].startswith("mem_")
    assert await storage.deps.vault.destroyed(candidate_id)  # decided: destroyed with the decision
    # The agent's retry (any key) now collects the operator's decision.
    final = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    assert json.loads(final.outcome_json) == outcome
    assert await listed(storage, who) == []
    assert await rpc_code(storage.admin.Adjudicate(admin_pb2.AdjudicateRequest(
        scope=who.scope, candidate_id=candidate_id, decision="reject", reason_ref="ticket:adj-2"),
        metadata=BEARER)) == "ILLEGAL_TRANSITION"
    event = await storage.deps.store.journal.find_one({"object_id": outcome["record_id"]})
    assert event["binding"]["actor"] == "operator" and event["binding"]["reason"] == "operator_adjudication"


async def test_reject_is_terminal_and_destroys_the_candidates_key(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, **HELD)
    candidate_id = await held(storage, who, "Held, then turned down.")
    outcome = await adjudicate(storage, who, candidate_id, "reject")
    assert outcome["status"] == "rejected" and "record_id" not in outcome
    # Its key is destroyed with the decision, in the same transaction: nothing owed to a task.
    assert await storage.deps.vault.destroyed(candidate_id)
    tasks = [row["task"] async for row in storage.deps.store.outbox.find({"object_id": candidate_id})]
    assert DESTROY_KEY not in tasks
    assert await rpc_code(storage.admin.Adjudicate(admin_pb2.AdjudicateRequest(
        scope=who.scope, candidate_id=candidate_id, decision="accept", reason_ref="ticket:x"),
        metadata=BEARER)) == "ALREADY_TERMINAL"


async def test_only_held_candidates_of_the_scope_and_valid_requests(storage: Storage) -> None:
    who, other = Who(), Who()
    await enable(storage, who)
    await enable(storage, other, **HELD)
    undecided = (await capture(storage, who, "Never sent to admission."))["candidate_id"]
    foreign = await held(storage, other, "Held in the other scope.")
    cases = [
        ({"candidate_id": undecided, "decision": "accept"}, "ILLEGAL_TRANSITION"),  # the worker decides it
        ({"candidate_id": foreign, "decision": "accept"}, "NOT_FOUND"),  # another scope's
        ({"candidate_id": undecided, "decision": "duplicate_exact"}, "INVALID_SCHEMA"),
        ({"candidate_id": undecided, "decision": "accept", "reason_ref": ""}, "INVALID_SCHEMA"),
    ]
    for fields, code in cases:
        request = admin_pb2.AdjudicateRequest(scope=who.scope, **{"reason_ref": "ticket:x", **fields})
        assert await rpc_code(storage.admin.Adjudicate(request, metadata=BEARER)) == code, fields
    assert await listed(storage, who) == []
    assert await rpc_code(storage.admin.ListPending(admin_pb2.ListPendingRequest(scope=who.scope, limit=1001),
                                                    metadata=BEARER)) == "INVALID_SCHEMA"
    assert [p["candidate_id"] for p in await listed(storage, other)] == [foreign]


async def test_pending_pages_by_candidate_id(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, **HELD)
    ids = sorted([await held(storage, who, f"Held note number {i}.") for i in range(3)])
    first = await listed(storage, who, limit=2)
    rest = await listed(storage, who, limit=2, after_candidate_id=first[-1]["candidate_id"])
    assert [p["candidate_id"] for p in first + rest] == ids
