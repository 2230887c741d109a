"""Admission, withdraw and forget through the StorageService (decisions by the worker's own
code over real gRPC): states, replays, refusals, isolation, erasure."""

from __future__ import annotations

import json

import pytest

from engram_api.storage.v1 import storage_pb2
from engram_core.digests import digest
from engram_core.taskq import DESTROY_KEY, INVALIDATE_PROJECTION
from engram_core.ids import is_record_id_strict
from storage_service.store import Scope
from storage_service.vault import RECORD
from tests.storage.helpers import (
    Storage, Who, accepted_record, admit, begin_request, capture, enable, rpc_code, transition_request,
)

WITHDRAW, FORGET = "engram_memory_withdraw", "engram_memory_forget"


async def test_accept_makes_a_readable_record(storage: Storage) -> None:
    who = Who()
    base = await enable(storage, who)
    captured = await capture(storage, who, "Accepted text for get.")
    outcome = await admit(storage, who, captured["candidate_id"])
    assert outcome["status"] == "accepted" and is_record_id_strict(outcome["record_id"])
    assert outcome["cursor"] == str(base + 2)
    got = await storage.stub.GetRecord(storage_pb2.GetRecordRequest(caller=who.caller, record_id=outcome["record_id"]))
    record = json.loads(got.record_json)
    assert record["record_digest"] == captured["record_digest"] == got.record_digest
    assert record["components"][0]["text"] == "Accepted text for get."
    assert record["trust"] == "asserted"
    assert got.validated_through_cursor == str(base + 2)


async def test_decided_candidate_replays_its_decision_for_any_key(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id, _ = await accepted_record(storage, who, "Decide once.")
    first = await admit(storage, who, candidate_id)
    second = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    assert json.loads(second.outcome_json) == first


async def test_same_admission_key_on_another_candidate_conflicts(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    a = (await capture(storage, who, "Candidate A."))["candidate_id"]
    b = (await capture(storage, who, "Candidate B."))["candidate_id"]
    await storage.stub.BeginAdmission(begin_request(who, a, "admission-key-00001"))
    assert await rpc_code(storage.stub.BeginAdmission(begin_request(who, b, "admission-key-00001"))) == "DIGEST_CONFLICT"


async def test_exact_duplicate_names_the_existing_record(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Said twice.")
    again = (await capture(storage, who, "Said twice."))["candidate_id"]
    outcome = await admit(storage, who, again)
    assert outcome["status"] == "duplicate_exact" and outcome["record_id"] == record_id
    candidate = await storage.deps.store.candidates.find_one({"_id": again})
    assert candidate["state"] == "rejected"


async def test_never_store_content_is_rejected(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "password: hunter2-very-secret"))["candidate_id"]
    outcome = await admit(storage, who, candidate_id)
    assert outcome["status"] == "rejected" and "record_id" not in outcome


async def test_policy_requiring_adjudication_holds_the_candidate(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, admission={"mode": "require_adjudication"})
    candidate_id = (await capture(storage, who, "Needs a human."))["candidate_id"]
    outcome = await admit(storage, who, candidate_id)
    assert outcome["status"] == "pending_adjudication"
    assert (await storage.deps.store.candidates.find_one({"_id": candidate_id}))["state"] == "pending"


async def test_withdraw_pending_then_terminal(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "Withdraw me."))["candidate_id"]
    request = transition_request(who, WITHDRAW, candidate_id)
    done = json.loads((await storage.stub.Withdraw(request)).value_json)
    assert done["receipt"]["from_state"] == "pending" and done["receipt"]["to_state"] == "withdrawn"
    assert done["replayed"] is False and done["key_destruction"] in ("pending", "complete")
    # The same request again carries a spent confirmation; an agent's retry brings a new one.
    assert await rpc_code(storage.stub.Withdraw(request)) == "gate_failed"
    retry = transition_request(who, WITHDRAW, candidate_id, idem=request.idempotency_key)
    replay = json.loads((await storage.stub.Withdraw(retry)).value_json)
    assert replay["replayed"] is True and replay["receipt"] == done["receipt"]
    assert await rpc_code(storage.stub.Withdraw(transition_request(who, WITHDRAW, candidate_id))) == "ALREADY_TERMINAL"
    assert await rpc_code(storage.stub.BeginAdmission(begin_request(who, candidate_id))) == "ALREADY_TERMINAL"


async def test_withdraw_accepted_is_illegal_and_rejected_is_terminal(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    accepted, _ = await accepted_record(storage, who, "Already accepted.")
    assert await rpc_code(storage.stub.Withdraw(transition_request(who, WITHDRAW, accepted))) == "ILLEGAL_TRANSITION"
    rejected = (await capture(storage, who, "api_key = abcdef0123456789"))["candidate_id"]
    assert (await admit(storage, who, rejected))["status"] == "rejected"
    assert await rpc_code(storage.stub.Withdraw(transition_request(who, WITHDRAW, rejected))) == "ALREADY_TERMINAL"


async def test_forget_tombstones_and_hides_at_once(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Forget me.")
    request = transition_request(who, FORGET, record_id)
    done = json.loads((await storage.stub.Forget(request)).value_json)
    assert done["receipt"]["operation"] == "tombstone"
    assert (done["receipt"]["from_state"], done["receipt"]["to_state"]) == ("accepted_current", "tombstoned")
    assert done["projection_invalidation"] == "pending" and "coverage_receipt_digest" not in done
    get = storage_pb2.GetRecordRequest(caller=who.caller, record_id=record_id)
    assert await rpc_code(storage.stub.GetRecord(get)) == "NOT_FOUND"
    fetched = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(scope=who.scope, record_ids=[record_id]))
    assert [(r.state, r.record_json) for r in fetched.records] == [("tombstoned", b"")]
    assert await rpc_code(storage.stub.Forget(transition_request(who, FORGET, record_id))) == "ALREADY_TERMINAL"
    tasks = sorted([row["task"] async for row in storage.deps.store.outbox.find({"object_id": record_id})])
    assert tasks == sorted([DESTROY_KEY, INVALIDATE_PROJECTION])


async def test_erasure_destroys_the_key_and_reports_coverage(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Erase me completely.")
    request = transition_request(who, FORGET, record_id)
    await storage.stub.Forget(request)
    store = storage.deps.store
    destroy = await store.outbox.find_one({"object_id": record_id, "task": DESTROY_KEY})
    receipt = await storage.stub.DestroyKey(storage_pb2.DestroyKeyRequest(outbox_id=destroy["_id"]))
    again = await storage.stub.DestroyKey(storage_pb2.DestroyKeyRequest(outbox_id=destroy["_id"]))
    assert receipt.key_destruction_receipt_digest == again.key_destruction_receipt_digest
    doc = await store.records.find_one({"_id": record_id})
    assert await rpc_code(storage.deps.vault.open(Scope(who.tenant, who.workspace), record_id, RECORD, doc["blob"])) == "BLOB_MISSING"
    invalidate = await store.outbox.find_one({"object_id": record_id, "task": INVALIDATE_PROJECTION})
    for bad in ([], ["search a:1"], ["x" * 129], [f"s{i}:1" for i in range(257)]):
        assert await rpc_code(storage.stub.RecordCoverage(storage_pb2.RecordCoverageRequest(
            outbox_id=invalidate["_id"], surfaces=["lexical_index"], replicas=bad))) == "INVALID_SCHEMA"
    coverage = await storage.stub.RecordCoverage(storage_pb2.RecordCoverageRequest(
        outbox_id=invalidate["_id"], surfaces=["page_cache", "lexical_index"],
        replicas=["search-b:50052", "search-a:50052", "search-b:50052"]))
    retry = transition_request(who, FORGET, record_id, idem=request.idempotency_key)
    replay = json.loads((await storage.stub.Forget(retry)).value_json)
    assert replay["replayed"] is True and replay["projection_invalidation"] == "complete"
    assert replay["coverage_receipt_digest"] == coverage.coverage_receipt_digest
    row = await store.outbox.find_one({"_id": invalidate["_id"]})
    receipt = row["coverage_receipt"]
    assert receipt["replicas"] == ["search-a:50052", "search-b:50052"]
    assert receipt["surfaces"] == ["lexical_index", "page_cache"]
    assert receipt["receipt_digest"] == coverage.coverage_receipt_digest
    assert digest("coverage", {k: v for k, v in receipt.items() if k != "receipt_digest"}) == receipt["receipt_digest"]


async def test_coverage_takes_up_to_256_replicas(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Covered by many replicas.")
    await storage.stub.Forget(transition_request(who, FORGET, record_id))
    invalidate = await storage.deps.store.outbox.find_one({"object_id": record_id, "task": INVALIDATE_PROJECTION})
    replicas = [f"search-{i}.search.engram.svc:50052" for i in range(255)] + ["[::1]:50052"]
    coverage = await storage.stub.RecordCoverage(storage_pb2.RecordCoverageRequest(
        outbox_id=invalidate["_id"], surfaces=["lexical_index"], replicas=replicas))
    assert coverage.coverage_receipt_digest.startswith("sha256:")


async def test_forgotten_content_goes_to_adjudication(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Content that was forgotten.")
    await storage.stub.Forget(transition_request(who, FORGET, record_id))
    recaptured = await capture(storage, who, "Content that was forgotten.")
    assert recaptured["status"] == "committed_pending"
    assert (await admit(storage, who, recaptured["candidate_id"]))["status"] == "pending_adjudication"
    # Only a keyed HMAC is kept, never the payload digest itself.
    doc = await storage.deps.store.forgotten.find_one({"scope": Scope(who.tenant, who.workspace).key})
    candidate = await storage.deps.store.candidates.find_one({"_id": recaptured["candidate_id"]})
    assert candidate["payload_digest"].removeprefix("sha256:") not in doc["_id"]


@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
async def test_other_scope_and_unknown_targets_are_not_found(storage: Storage, tool: str) -> None:
    owner, stranger = Who(), Who()
    await enable(storage, owner)
    await enable(storage, stranger)
    candidate_id, record_id = await accepted_record(storage, owner, f"Private to the owner ({tool}).")
    pending = (await capture(storage, owner, "Pending, private."))["candidate_id"]
    target = pending if tool == WITHDRAW else record_id
    method = storage.stub.Withdraw if tool == WITHDRAW else storage.stub.Forget
    assert await rpc_code(method(transition_request(stranger, tool, target))) == "NOT_FOUND"
    unknown = target[:-4] + "aaaa"
    assert await rpc_code(method(transition_request(owner, tool, unknown))) == "NOT_FOUND"
    get = storage_pb2.GetRecordRequest(caller=stranger.caller, record_id=record_id)
    assert await rpc_code(storage.stub.GetRecord(get)) == "NOT_FOUND"
    assert await rpc_code(storage.stub.BeginAdmission(begin_request(stranger, candidate_id))) == "NOT_FOUND"
    fetched = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(scope=stranger.scope, record_ids=[record_id]))
    assert list(fetched.records) == []
