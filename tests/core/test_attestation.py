"""Attestations (engram_core/attestation.py): what verifies is `signed` or `earned` by the key's
registered class; every other token is refused with a constant reason, never its content."""

from __future__ import annotations

import pytest

from engram_core.attestation import (
    ATTESTATION_TYP,
    AttestationInvalid,
    attested_digest,
    is_bound_attestation,
    verify_attestation,
)
from engram_core.jws import private_key_from_b64url, sign_compact
from engram_core.policy import AttesterKey
from engram_hostkit import generate_host_keys, mint_attestation
from engram_hostkit.examples import make_capture_args

ARGS = make_capture_args(text="Decision: pin grpcio and protobuf together.")
PAYLOAD, EVIDENCE = ARGS["payload"], ARGS["evidence"]
SCOPE = {"tenant": "t1", "workspace": "w1"}
PRIVATE, PUBLIC = generate_host_keys()
OTHER_PRIVATE, _ = generate_host_keys()
KEYS = (AttesterKey(key_id="attester-1", public_key=PUBLIC),)


def attest(key_id: str = "attester-1", private: str = PRIVATE, **over: object) -> str:
    bound = {**SCOPE, "payload": PAYLOAD, "evidence_digest": EVIDENCE["evidence_digest"], **over}
    return mint_attestation(key_id, private, **bound)  # type: ignore[arg-type]


def check(token: str, keys: tuple[AttesterKey, ...] = KEYS, **over: object) -> str:
    bound = {**SCOPE, "payload": PAYLOAD, "evidence_digest": EVIDENCE["evidence_digest"], **over}
    return verify_attestation(token, keys, **bound)  # type: ignore[arg-type]


def test_a_verified_attestation_takes_its_keys_class() -> None:
    assert check(attest()) == "signed"
    verifier = (AttesterKey(key_id="attester-1", public_key=PUBLIC, trust="earned"),)
    assert check(attest(), verifier) == "earned"


def test_retention_is_not_part_of_what_is_attested() -> None:
    resolved = {**PAYLOAD, "retention": {"derivative_rule": "make-ineligible"}}
    assert attested_digest(resolved) == attested_digest(PAYLOAD)
    assert check(attest(), payload=resolved) == "signed"


@pytest.mark.parametrize(("case", "reason"), [
    ("unknown key", "unknown_kid"),
    ("signed by another key", "bad_signature"),
    ("other tenant", "tenant_mismatch"),
    ("other workspace", "workspace_mismatch"),
    ("other payload", "payload_digest_mismatch"),
    ("other evidence", "evidence_digest_mismatch"),
    ("a context token", "bad_typ"),
    ("not a token", "not_three_parts"),
])
def test_what_does_not_verify_is_refused_with_a_constant_reason(case: str, reason: str) -> None:
    other = make_capture_args(text="Decision: something else.")["payload"]
    token = {
        "unknown key": lambda: attest(key_id="attester-2"),
        "signed by another key": lambda: attest(private=OTHER_PRIVATE),
        "other tenant": lambda: attest(tenant="t2"),
        "other workspace": lambda: attest(workspace="w2"),
        "other payload": lambda: attest(payload=other),
        "other evidence": lambda: attest(evidence_digest="sha256:" + "0" * 64),
        "a context token": lambda: sign_compact({"typ": "engram-context+jwt", "kid": "attester-1"}, {},
                                                private_key_from_b64url(PRIVATE)),
        "not a token": lambda: "attestation-blob",
    }[case]()
    with pytest.raises(AttestationInvalid) as refused:
        check(token)
    assert refused.value.reason == reason
    assert str(refused.value) == "invalid attestation"


def test_no_registered_key_means_nothing_verifies() -> None:
    with pytest.raises(AttestationInvalid):
        check(attest(), keys=())


def test_the_token_names_its_type_and_key() -> None:
    import base64
    import json

    header = json.loads(base64.urlsafe_b64decode(attest().split(".")[0] + "=="))
    assert header == {"alg": "EdDSA", "typ": ATTESTATION_TYP, "kid": "attester-1"}


def test_only_the_bound_claims_and_a_minimal_header_verify() -> None:
    private = private_key_from_b64url(PRIVATE)
    claims = {**SCOPE, "payload_digest": attested_digest(PAYLOAD), "evidence_digest": EVIDENCE["evidence_digest"]}
    extra_claim = sign_compact({"typ": ATTESTATION_TYP, "kid": "attester-1"}, {**claims, "note": "x"}, private)
    extra_header = sign_compact({"typ": ATTESTATION_TYP, "kid": "attester-1", "x5u": "https://x"}, claims, private)
    for token, reason in ((extra_claim, "claims_not_exact"), (extra_header, "extra_header")):
        with pytest.raises(AttestationInvalid) as refused:
            check(token)
        assert refused.value.reason == reason
    assert check(sign_compact({"typ": ATTESTATION_TYP, "kid": "attester-1"}, claims, private)) == "signed"


def test_the_bound_shape_is_recognised_without_the_key() -> None:
    bound = {**SCOPE, "payload": PAYLOAD, "evidence_digest": EVIDENCE["evidence_digest"]}
    assert is_bound_attestation(attest(), **bound)  # type: ignore[arg-type]
    assert is_bound_attestation(attest(private=OTHER_PRIVATE), **bound)  # signature aside
    assert not is_bound_attestation(attest(tenant="t2"), **bound)  # type: ignore[arg-type]
    assert not is_bound_attestation("attestation-blob", **bound)  # type: ignore[arg-type]
    assert not is_bound_attestation(None, **bound)  # type: ignore[arg-type]
