"""The admission decision order (SPEC §10) and never-store screening."""

from __future__ import annotations

import base64
import urllib.parse

import pytest

from admission_worker.decide import decide
from admission_worker.tasks import _policy
from engram_core.policy import AdmissionRules, ScopePolicy
from admission_worker.screening import DETECTOR_NAMES, INCOMPLETE, MAX_FIELD_BYTES, screen
from admission_worker.screening.library import LIBRARY_NAMES, match_library
from admission_worker.screening.rules import RULE_NAMES, match_rules
from engram_hostkit.examples import make_capture_args


def payload_with(text: str) -> tuple[dict, dict]:
    args = make_capture_args(text=text)
    return args["payload"], args["evidence"]


# One positive case per rule of our own (the library's plugins are scored by the corpus).
SECRETS = {
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...",
    "aws_access_key": "the key is AKIA2E3A7F3B244C2756 for prod",
    "aws_secret_key": "aws_secret_access_key = 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",
    "github_token": "use ghp_abcdefghijklmnopqrstuvwxyz0123456789 to push",
    "gitlab_token": "deploy with glpat-Ab3dEf6hIj9kLm2nOp5q",
    "slack_token": "bot token xoxb-1234567890-abcdefghij",
    "slack_webhook": "alerts go to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcdEFGHijklMNOPqrstUVWX",
    "discord_webhook": "https://discord.com/api/webhooks/123456789012345678/abcDEF123-ghiJKL456_mnoPQR789",
    "discord_bot_token": "bot token MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456",
    "teams_webhook": "https://contoso.webhook.office.com/webhookb2/0f0e0d0c-0b0a-0908-0706-050403020100@tenant/IncomingWebhook/abc",
    "telegram_bot_token": "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1",
    "stripe_key": "stripe sk_live_abcdefghijklmnop1234",
    "ai_api_key": "OPENAI_API_KEY=sk-proj-abcdefghij1234567890T3BlbkFJabcdefghij1234567890",
    "google_api_key": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "package_registry_token": "//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789",
    "messaging_api_key": "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
    "commerce_token": "shopify shpat_0123456789abcdef0123456789abcdef",
    "azure_storage_key": "AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9v==",
    "azure_sas_token": "https://a.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig=abcdEFGH1234ijklMNOP5678%2B",
    "host_token": "eyJhbGciOiJFZERTQSIsInR5cCI6ImVuZ3JhbS1jb250ZXh0K2p3dCJ9.eyJ0ZW5hbnQiOiJ0MSJ9.c2lnbmF0dXJlLXZhbHVl",
    "jwt": "token eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJlLXZhbHVl",
    "connection_string": "connect with postgres://admin:hunter2@db.internal:5432/app",
    "password": "the password is hunter2!",
    "dotenv_secret": "DATABASE_PASSWORD=s3cr3tvalue",
    "session_cookie": "Cookie: sessionid=abcdef1234567890",
    "auth_header": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz123456",
    "secret_assignment": 'client_secret = "a8Fk2LmQ9zXc7VbN"',
}


def test_every_rule_of_ours_has_a_positive_case() -> None:
    assert set(SECRETS) == set(RULE_NAMES)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_is_found_and_rejected_naming_the_detector(name: str) -> None:
    payload, evidence = payload_with(f"Decision: rotate it. {SECRETS[name]}")
    assert match_rules(SECRETS[name]) == name
    assert screen(payload, evidence) in DETECTOR_NAMES
    verdict = decide(payload, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False)
    assert verdict.decision == "reject"
    assert verdict.reason.startswith("never_store:")
    assert verdict.reason.removeprefix("never_store:") in DETECTOR_NAMES
    assert SECRETS[name] not in verdict.reason


_HEX = "0123456789abcdef"
# One synthetic hit for each plugin screening gates by keyword (library._GATES).
GATED_PLUGIN_HITS = {
    "ds.CloudantDetector": f"https://acme-admin:{_HEX * 4}@acme-admin.cloudant.com",
    "ds.IbmCloudIamDetector": 'ibm_cloud_iam_api_key = "' + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5kL7nP9r" + 'x"',
    "ds.IbmCosHmacDetector": 'cos_hmac_secret_access_key = "' + _HEX * 3 + '"',
    "ds.SoftlayerDetector": 'softlayer_api_key = "' + "a1b2c3d4e5f6g7h8" * 4 + '"',
    "ds.ArtifactoryDetector": "token AKCp8" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5kL7nP9r" * 2,
}


@pytest.mark.parametrize("name", sorted(GATED_PLUGIN_HITS))
def test_the_gated_plugins_still_fire(name: str) -> None:
    from admission_worker.screening.library import _GATES, DETECTORS

    assert set(GATED_PLUGIN_HITS) == {f"ds.{plugin}" for plugin in _GATES}
    (detector,) = [d for d in DETECTORS if d.name == name]
    text = GATED_PLUGIN_HITS[name]
    assert any(word in text.lower() for word in detector.gate)  # the gate lets its own hit through
    assert list(detector.scan(text))
    assert match_library(text) is not None


def test_the_library_detectors_are_loaded_and_named() -> None:
    assert "ds.AWSKeyDetector" in LIBRARY_NAMES and "ds.KeywordDetector" in LIBRARY_NAMES
    assert "ds.Base64HighEntropyString" not in LIBRARY_NAMES  # fires on digests and images
    payload, evidence = payload_with("Decision: the account key is 'ARTI' plus AKCp8abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU")
    assert screen(payload, evidence) == "ds.ArtifactoryDetector"


@pytest.mark.parametrize(
    "text",
    [
        "Decision: we rotate API keys every 90 days and store them in the vault.",
        "The password policy requires 12 characters.",
        "Use a bearer token from the identity provider; never paste it here.",
        "postgres://db.internal:5432/app is the read replica (no credentials).",
        "The header typ of a host context is engram-context+jwt, under io.engram/context.",
        "token: {{ .Values.slack.token }} and password: ${DB_PASSWORD}",
    ],
)
def test_talking_about_secrets_is_not_a_secret(text: str) -> None:
    payload, evidence = payload_with(text)
    assert screen(payload, evidence) is None


def test_a_secret_in_a_key_at_any_depth_is_found() -> None:
    payload, evidence = payload_with("Decision: nothing here.")
    payload["extra"] = [{"deeper": {"ghp_abcdefghijklmnopqrstuvwxyz0123456789": 1}}]
    assert screen(payload, evidence) == "github_token"


def test_encoded_secrets_are_decoded_once() -> None:
    pem = base64.b64encode(b"-----BEGIN RSA PRIVATE KEY-----\nMIIEow").decode()
    assert screen({"t": f"data:\n  tls.key: {pem}"}) == "private_key"
    quoted = urllib.parse.quote("postgres://app:S3cret!pw@db:5432/x", safe="")
    assert screen({"t": f"next={quoted}"}) == "connection_string"
    twice = base64.b64encode(pem.encode()).decode()
    assert screen({"t": twice}) is None  # one level deep, by design


def test_the_screening_bounds_fail_closed() -> None:
    big = "a" * (MAX_FIELD_BYTES + 1)
    assert screen({"t": big}) == INCOMPLETE
    assert screen({"t": "é" * (MAX_FIELD_BYTES // 2)}) is None  # 65,536 bytes: read in full
    assert screen({"t": "é" * (MAX_FIELD_BYTES // 2 + 1)}) == INCOMPLETE
    assert screen({"t": "Decision: fine."}, budget_seconds=0.0) == INCOMPLETE
    payload, evidence = payload_with("Decision: fine.")
    verdict = decide(payload, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False,
                     screening_budget_seconds=0.0)
    assert (verdict.decision, verdict.reason) == ("reject", INCOMPLETE)


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


def test_a_bound_attestation_is_not_screened_and_anything_else_in_its_place_is() -> None:
    from engram_core.attestation import ATTESTATION_TYP, attested_digest
    from engram_core.jws import private_key_from_b64url, sign_compact
    from engram_hostkit import generate_host_keys, mint_attestation

    private, _ = generate_host_keys()
    clean, evidence = payload_with("Decision: attested.")
    scope = {"tenant": "t1", "workspace": "w1"}
    evidence["attestation"] = mint_attestation("a-1", private, payload=clean, evidence_digest=evidence["evidence_digest"],
                                               **scope)
    assert decide(clean, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False,
                  **scope).decision == "accept"
    smuggled = {**scope, "payload_digest": attested_digest(clean), "evidence_digest": evidence["evidence_digest"],
                "note": "password: hunter2hunter2"}
    evidence["attestation"] = sign_compact({"typ": ATTESTATION_TYP, "kid": "a-1"}, smuggled, private_key_from_b64url(private))
    verdict = decide(clean, evidence, ScopePolicy(), duplicate_of_record_id="", matches_forgotten=False, **scope)
    assert verdict.decision == "reject" and verdict.reason.startswith("never_store:")
