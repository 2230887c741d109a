"""Capture through the StorageService: the mutation gate, encryption at rest, retention rules."""

from __future__ import annotations

import json

import pytest

from engram_core.digests import capture_identity_digest, is_digest
from engram_core.ids import candidate_id_from_digest, is_candidate_id_strict
from engram_core.timefmt import format_instant, now_ms
from engram_hostkit.examples import make_capture_args
from storage_service.store import Scope
from tests.storage.helpers import PURPOSE, Storage, Who, capture, capture_request, enable, key, rpc_code

DAY_MS = 86_400_000


async def test_capture_commits_an_encrypted_pending_candidate(storage: Storage) -> None:
    who = Who()
    base = await enable(storage, who)
    secret_text = "The quokka protocol uses port 7411 for the blue channel."
    idem = key("cap")
    answer = await capture(storage, who, secret_text, idempotency_key=idem)
    assert answer["status"] == "committed_pending"
    assert answer["candidate_id"] == candidate_id_from_digest(capture_identity_digest(who.tenant, who.workspace, who.principal, idem))
    assert is_candidate_id_strict(answer["candidate_id"])
    assert is_digest(answer["record_digest"]) and is_digest(answer["transaction_receipt_digest"])
    assert answer["cursor"] == str(base + 1)
    # Nothing of the text is stored in clear anywhere in the database.
    db = storage.deps.store.db
    for name in await db.list_collection_names():
        async for doc in db[name].find({}):
            assert b"quokka" not in repr(doc).encode(), name


async def test_replay_returns_the_first_answer_as_duplicate_exact(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    args = make_capture_args(idempotency_key=key("cap"), text="Replay me.", purpose_ref=PURPOSE)
    first = json.loads((await storage.stub.Capture(capture_request(who, args))).value_json)
    again = await storage.stub.Capture(capture_request(who, args))
    assert again.replayed is True
    assert json.loads(again.value_json) == {**first, "status": "duplicate_exact"}
    # No second journal event was written (the other is the enable's policy change).
    assert await storage.deps.store.journal.count_documents({"scope": Scope(who.tenant, who.workspace).key,
                                                             "operation": "capture"}) == 1


async def test_same_key_other_content_is_a_digest_conflict(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    idem = key("cap")
    await capture(storage, who, "First content.", idempotency_key=idem)
    other = make_capture_args(idempotency_key=idem, text="Other content.", purpose_ref=PURPOSE)
    assert await rpc_code(storage.stub.Capture(capture_request(who, other))) == "DIGEST_CONFLICT"


async def test_keys_are_scoped_to_the_principal(storage: Storage) -> None:
    who = Who()
    base = await enable(storage, who)
    idem = key("cap")
    a = await capture(storage, who, "Ada's note.", idempotency_key=idem)
    b = await capture(storage, who.other_principal("user:bob"), "Bob's note.", idempotency_key=idem)
    assert a["status"] == b["status"] == "committed_pending"
    assert a["candidate_id"] != b["candidate_id"]
    assert (a["cursor"], b["cursor"]) == (str(base + 1), str(base + 2))


async def test_capture_in_a_disabled_scope_is_unauthorized(storage: Storage) -> None:
    args = make_capture_args(idempotency_key=key("cap"), purpose_ref=PURPOSE)
    assert await rpc_code(storage.stub.Capture(capture_request(Who(), args))) == "UNAUTHORIZED"


@pytest.mark.parametrize("allowed, expected", [(False, "UNAUTHORIZED"), (True, None)])
async def test_retain_needs_the_scopes_permission(storage: Storage, allowed: bool, expected: str | None) -> None:
    who = Who()
    await enable(storage, who, retain_allowed=allowed)
    args = make_capture_args(idempotency_key=key("cap"), purpose_ref=PURPOSE, retention={"derivative_rule": "retain"})
    if expected:
        assert await rpc_code(storage.stub.Capture(capture_request(who, args))) == expected
    else:
        assert json.loads((await storage.stub.Capture(capture_request(who, args))).value_json)["status"] == "committed_pending"


@pytest.mark.parametrize("days, expected", [(29, None), (31, "UNAUTHORIZED")])
async def test_expires_at_within_the_scope_cap(storage: Storage, days: int, expected: str | None) -> None:
    who = Who()
    await enable(storage, who, retention_cap_ms=30 * DAY_MS)
    retention = {"derivative_rule": "make-ineligible", "expires_at": format_instant(now_ms() + days * DAY_MS)}
    args = make_capture_args(idempotency_key=key("cap"), purpose_ref=PURPOSE, retention=retention)
    call = storage.stub.Capture(capture_request(who, args))
    if expected:
        assert await rpc_code(call) == expected
    else:
        assert json.loads((await call).value_json)["status"] == "committed_pending"


async def test_expires_at_not_after_now_is_invalid(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    retention = {"derivative_rule": "make-ineligible", "expires_at": format_instant(now_ms() - 1)}
    args = make_capture_args(idempotency_key=key("cap"), purpose_ref=PURPOSE, retention=retention)
    assert await rpc_code(storage.stub.Capture(capture_request(who, args))) == "INVALID_SCHEMA"


@pytest.mark.parametrize("consented, expected", [(["family:a", "family:b"], None), (["family:a"], "UNAUTHORIZED")])
async def test_reconciliation_families_need_consent(storage: Storage, consented: list[str], expected: str | None) -> None:
    who = Who()
    await enable(storage, who, reconciliation_families=consented)
    args = make_capture_args(idempotency_key=key("cap"), purpose_ref=PURPOSE, family_refs=["family:a", "family:b"])
    call = storage.stub.Capture(capture_request(who, args))
    if expected:
        assert await rpc_code(call) == expected
    else:
        assert json.loads((await call).value_json)["status"] == "committed_pending"


async def test_resolved_retention_is_part_of_the_record_digest(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    omitted = make_capture_args(idempotency_key=key("cap"), text="Same text.", purpose_ref=PURPOSE)
    explicit = make_capture_args(idempotency_key=key("cap"), text="Same text.", purpose_ref=PURPOSE,
                                 retention={"derivative_rule": "make-ineligible"})
    a = json.loads((await storage.stub.Capture(capture_request(who, omitted))).value_json)
    b = json.loads((await storage.stub.Capture(capture_request(who, explicit))).value_json)
    candidates = storage.deps.store.candidates
    da = await candidates.find_one({"_id": a["candidate_id"]})
    db_ = await candidates.find_one({"_id": b["candidate_id"]})
    assert da["payload_digest"] == db_["payload_digest"]


async def test_malformed_operation_digest_is_refused(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    args = make_capture_args(idempotency_key=key("cap"), purpose_ref=PURPOSE)
    request = capture_request(who, args)
    request.operation_digest = "sha256:XYZ"
    assert await rpc_code(storage.stub.Capture(request)) == "INVALID_DIGEST"
    request.operation_digest = "sha256:" + "0" * 64
    request.payload_json = b"{not json"
    assert await rpc_code(storage.stub.Capture(request)) == "INVALID_SCHEMA"
