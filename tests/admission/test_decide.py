"""The admission decision order (SPEC §10) and never-store screening."""

from __future__ import annotations

import pytest

from admission_worker.decide import decide
from admission_worker.tasks import _policy
from engram_core.policy import AdmissionRules, ScopePolicy
from admission_worker.screening import DETECTOR_NAMES, find_secret
from engram_hostkit.examples import make_capture_args


def payload_with(text: str) -> tuple[dict, dict]:
    args = make_capture_args(text=text)
    return args["payload"], args["evidence"]


SECRETS = {
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...",
    "aws_access_key": "the key is AKIAIOSFODNN7EXAMPLE for prod",
    "github_token": "use ghp_abcdefghijklmnopqrstuvwxyz0123456789 to push",
    "slack_token": "bot token xoxb-1234567890-abcdefghij",
    "api_key_prefixed": "stripe sk_live_abcdefghijklmnop1234",
    "google_api_key": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "jwt": "token eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJlLXZhbHVl",
    "bearer_token": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz123456",
    "connection_string": "connect with postgres://admin:hunter2@db.internal:5432/app",
    "credential_assignment": "password = correcthorse",
    "dotenv_secret": "DATABASE_PASSWORD=s3cr3tvalue",
    "session_cookie": "Cookie: sessionid=abcdef1234567890",
    "engram_binding": "the header typ was engram-context+jwt",
}


def test_every_detector_has_a_positive_case() -> None:
    assert set(SECRETS) == set(DETECTOR_NAMES)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_is_found_and_rejected(name: str) -> None:
    payload, evidence = payload_with(f"Decision: rotate it. {SECRETS[name]}")
    assert find_secret(payload, evidence) is not None
    verdict = decide(payload, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False)
    assert verdict.decision == "reject"
    assert verdict.reason.startswith("never_store:")
    assert SECRETS[name] not in verdict.reason


@pytest.mark.parametrize(
    "text",
    [
        "Decision: we rotate API keys every 90 days and store them in the vault.",
        "The password policy requires 12 characters.",
        "Use a bearer token from the identity provider; never paste it here.",
        "postgres://db.internal:5432/app is the read replica (no credentials).",
    ],
)
def test_talking_about_secrets_is_not_a_secret(text: str) -> None:
    payload, evidence = payload_with(text)
    assert find_secret(payload, evidence) is None


def test_secret_in_evidence_is_found() -> None:
    payload, evidence = payload_with("Decision: nothing secret here.")
    evidence["evidence_ref"] = "password=abcdef123"
    assert decide(payload, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False).decision == "reject"


def test_order_screening_before_duplicate_before_policy_before_forgotten() -> None:
    clean, evidence = payload_with("Decision: pin the three gRPC packages together.")
    dirty, _ = payload_with("password: hunter2hunter2")
    assert decide(dirty, evidence, ScopePolicy(), duplicate_of_record_id="mem_x", matches_forgotten=True).decision == "reject"
    assert decide(clean, evidence, ScopePolicy(), duplicate_of_record_id="mem_x", matches_forgotten=True).decision == "duplicate_exact"
    reject_all = ScopePolicy(admission=AdmissionRules(mode="reject_all"))
    assert decide(clean, evidence, reject_all, duplicate_of_record_id="", matches_forgotten=True).decision == "reject"
    hold = ScopePolicy(admission=AdmissionRules(mode="require_adjudication"))
    assert decide(clean, evidence, hold, duplicate_of_record_id="", matches_forgotten=False).decision == "pending_adjudication"
    assert decide(clean, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=True).decision == "pending_adjudication"
    accepted = decide(clean, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False)
    assert (accepted.decision, accepted.trust) == ("accept", "asserted")


def test_a_policy_the_worker_cannot_read_never_admits() -> None:
    clean, evidence = payload_with("Decision: fine.")
    unreadable = _policy(b'{"admission": {"mode": "yolo"}}')
    assert unreadable is None
    verdict = decide(clean, evidence, unreadable, duplicate_of_record_id="", matches_forgotten=False)
    assert (verdict.decision, verdict.reason) == ("pending_adjudication", "policy_unknown")
    dirty, _ = payload_with("password: hunter2hunter2")
    assert decide(dirty, evidence, None, duplicate_of_record_id="", matches_forgotten=False).decision == "reject"


def test_event_types_the_operator_names_are_held() -> None:
    clean, evidence = payload_with("Decision: fine.")
    kind = clean["primary_event"]["type_ref"]
    held = ScopePolicy(admission=AdmissionRules(adjudicate_types=(kind,)))
    verdict = decide(clean, evidence, held, duplicate_of_record_id="", matches_forgotten=False)
    assert (verdict.decision, verdict.reason) == ("pending_adjudication", "policy_type")
    other = ScopePolicy(admission=AdmissionRules(adjudicate_types=(kind + "-other",)))
    assert decide(clean, evidence, other, duplicate_of_record_id="", matches_forgotten=False).decision == "accept"


@pytest.mark.parametrize(("required", "below", "expected"), [
    ("asserted", "reject", "accept"),
    ("signed", "reject", "reject"),
    ("signed", "adjudicate", "pending_adjudication"),
    ("earned", "adjudicate", "pending_adjudication"),
])
def test_a_required_trust_class_above_the_candidates_is_not_admitted(required: str, below: str,
                                                                      expected: str) -> None:
    clean, evidence = payload_with("Decision: fine.")
    policy = ScopePolicy(admission=AdmissionRules(require_trust=required, below_trust=below))
    verdict = decide(clean, evidence, policy, duplicate_of_record_id="", matches_forgotten=False)
    assert (verdict.decision, verdict.trust) == (expected, "asserted")
    if expected != "accept":
        assert verdict.reason == "trust_below_required"
