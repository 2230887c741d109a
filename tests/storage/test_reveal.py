"""Revealing a held candidate's plaintext (SPEC §12: candidate inspection never shows pending
plaintext without an explicit permission): refused unless the scope's policy sets
``reveal_pending`` (nothing journaled), and each permitted reveal is a journal event by the
operator committed before the plaintext is returned."""

from __future__ import annotations

import json

from engram_api.admin.v1 import admin_pb2
from engram_core.digests import digest
from storage_service.store import Scope
from tests.storage.helpers import BEARER, Storage, Who, admit, capture, enable, rpc_code

TEXT = "Held for a human: the harbour master's private number is on the wiki."


def reveal(storage: Storage, who: Who, candidate_id: str, reason: str = "ticket:REV-1"):  # type: ignore[no-untyped-def]
    return storage.admin.RevealCandidate(admin_pb2.RevealCandidateRequest(
        scope=who.scope, candidate_id=candidate_id, reason_ref=reason), metadata=BEARER)


async def held(storage: Storage, who: Who) -> str:
    candidate_id = (await capture(storage, who, TEXT))["candidate_id"]
    assert (await admit(storage, who, candidate_id))["status"] == "pending_adjudication"
    return candidate_id


async def reveals(storage: Storage, who: Who) -> int:
    return await storage.deps.store.journal.count_documents({"scope": Scope(who.tenant, who.workspace).key,
                                                             "operation": "reveal"})


async def test_a_reveal_needs_the_scopes_permission_and_is_journaled(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, admission={"mode": "require_adjudication"})
    candidate_id = await held(storage, who)
    pending = await storage.admin.ListPending(admin_pb2.ListPendingRequest(scope=who.scope), metadata=BEARER)
    assert TEXT not in pending.candidates_json.decode()  # the list never shows plaintext
    assert await rpc_code(reveal(storage, who, candidate_id)) == "UNAUTHORIZED"
    assert await reveals(storage, who) == 0
    await enable(storage, who, reveal_pending=True)
    shown = json.loads((await reveal(storage, who, candidate_id)).value_json)
    assert shown["payload"]["components"][0]["text"] == TEXT and shown["candidate_id"] == candidate_id
    event = await storage.deps.store.journal.find_one({"scope": Scope(who.tenant, who.workspace).key,
                                                       "cursor": int(shown["cursor"])})
    assert (event["operation"], event["object_id"], event["from_state"], event["to_state"]) == (
        "reveal", candidate_id, "pending", "pending")
    assert event["binding"] == {"actor": "operator", "reason_digest": digest("operation", {"reason_ref": "ticket:REV-1"})}
    assert TEXT not in json.dumps(event, default=str)
    history = json.loads((await storage.admin.ObjectHistory(admin_pb2.ObjectHistoryRequest(
        scope=who.scope, object_id=candidate_id), metadata=BEARER)).value_json)
    assert [e["operation"] for e in history["events"]] == ["capture", "hold", "reveal"]
    # The candidate is still held: an operator decides it as before.
    decided = await storage.admin.Adjudicate(admin_pb2.AdjudicateRequest(
        scope=who.scope, candidate_id=candidate_id, decision="reject", reason_ref="ticket:REV-1"), metadata=BEARER)
    assert json.loads(decided.outcome_json)["status"] == "rejected"
    assert await rpc_code(reveal(storage, who, candidate_id)) == "ALREADY_TERMINAL"


async def test_only_held_candidates_of_the_scope_are_revealed(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, reveal_pending=True)
    undecided = (await capture(storage, who, "Not yet decided by the worker."))["candidate_id"]
    assert await rpc_code(reveal(storage, who, undecided)) == "ILLEGAL_TRANSITION"
    assert await rpc_code(reveal(storage, Who(), undecided)) in ("UNAUTHORIZED", "NOT_FOUND")
    assert await rpc_code(reveal(storage, who, "cand_" + "a" * 52)) == "NOT_FOUND"
    assert await rpc_code(reveal(storage, who, undecided, reason="")) == "INVALID_SCHEMA"
    assert await reveals(storage, who) == 0
