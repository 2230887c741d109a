"""Trust classes (SPEC §10) end to end through storage and the worker's decision: an attestation
under a key the operator registered makes the record `signed` (or `earned` for the host's
evidence verifier's key); one that does not verify is refused at capture with INVALID_SCHEMA;
a key removed before the decision no longer vouches; the caller never picks the class."""

from __future__ import annotations

import json

from engram_api.storage.v1 import storage_pb2
from engram_hostkit import generate_host_keys, mint_attestation
from engram_hostkit.examples import make_capture_args
from tests.storage.helpers import PURPOSE, Storage, Who, admit, capture_request, enable, key, rpc_code

PRIVATE, PUBLIC = generate_host_keys()
OTHER_PRIVATE, _ = generate_host_keys()


def attester(trust: str = "signed", key_id: str = "attester-1") -> dict[str, str]:
    return {"key_id": key_id, "public_key": PUBLIC, "trust": trust}


def attested_args(who: Who, text: str, *, private: str = PRIVATE, tenant: str | None = None) -> dict:
    args = make_capture_args(idempotency_key=key("cap"), text=text, purpose_ref=PURPOSE)
    args["evidence"]["attestation"] = mint_attestation(
        "attester-1", private, tenant=tenant or who.tenant, workspace=who.workspace, payload=args["payload"],
        evidence_digest=args["evidence"]["evidence_digest"])
    return args


async def captured(storage: Storage, who: Who, args: dict) -> str:
    reply = await storage.stub.Capture(capture_request(who, args))
    return json.loads(reply.value_json)["candidate_id"]


async def record_trust(storage: Storage, who: Who, record_id: str) -> str:
    got = await storage.stub.GetRecord(storage_pb2.GetRecordRequest(caller=who.caller, record_id=record_id))
    return json.loads(got.record_json)["trust"]


async def test_a_verified_attestation_makes_the_record_signed(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, attester_keys=[attester()])
    outcome = await admit(storage, who, await captured(storage, who, attested_args(who, "Signed fact.")))
    assert outcome["status"] == "accepted"
    assert await record_trust(storage, who, outcome["record_id"]) == "signed"


async def test_the_evidence_verifiers_key_makes_it_earned(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, attester_keys=[attester("earned")], admission={"require_trust": "earned"})
    outcome = await admit(storage, who, await captured(storage, who, attested_args(who, "Verified fact.")))
    assert outcome["status"] == "accepted"
    assert await record_trust(storage, who, outcome["record_id"]) == "earned"


async def test_an_attestation_that_does_not_verify_is_refused_at_capture(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, attester_keys=[attester()])
    for args in (attested_args(who, "Forged.", private=OTHER_PRIVATE),
                 attested_args(who, "Another scope's.", tenant="t-other"),
                 {**make_capture_args(idempotency_key=key("cap"), text="Opaque.", purpose_ref=PURPOSE,
                                      attestation="attestation-blob")}):
        assert await rpc_code(storage.stub.Capture(capture_request(who, args))) == "INVALID_SCHEMA"
    unregistered = Who()
    await enable(storage, unregistered)
    assert await rpc_code(storage.stub.Capture(capture_request(
        unregistered, attested_args(unregistered, "No keys registered.")))) == "INVALID_SCHEMA"
    assert await storage.deps.store.candidates.count_documents({"tenant": {"$in": [who.tenant, unregistered.tenant]}}) == 0


async def test_an_attestation_moved_to_other_content_does_not_verify(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, attester_keys=[attester()])
    good = attested_args(who, "The attested text.")
    moved = make_capture_args(idempotency_key=key("cap"), text="Other text.", purpose_ref=PURPOSE,
                              attestation=good["evidence"]["attestation"])
    assert await rpc_code(storage.stub.Capture(capture_request(who, moved))) == "INVALID_SCHEMA"


async def test_a_key_removed_before_the_decision_no_longer_vouches(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, attester_keys=[attester()], admission={"require_trust": "signed", "below_trust": "adjudicate"})
    candidate_id = await captured(storage, who, attested_args(who, "Signed, then the key went."))
    await enable(storage, who, attester_keys=[])
    outcome = await admit(storage, who, candidate_id)
    assert outcome["status"] == "pending_adjudication"
    held = await storage.deps.store.candidates.find_one({"_id": candidate_id})
    assert held["state"] == "pending"


async def test_below_the_required_class_is_not_admitted_and_signed_is(storage: Storage) -> None:
    who = Who()
    await enable(storage, who, attester_keys=[attester()], admission={"require_trust": "signed"})
    plain = (await storage.stub.Capture(capture_request(
        who, make_capture_args(idempotency_key=key("cap"), text="Only asserted.", purpose_ref=PURPOSE))))
    assert (await admit(storage, who, json.loads(plain.value_json)["candidate_id"]))["status"] == "rejected"
    signed = await admit(storage, who, await captured(storage, who, attested_args(who, "Signed and required.")))
    assert signed["status"] == "accepted"
