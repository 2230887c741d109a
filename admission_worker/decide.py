"""The admission decision (SPEC §10), made inside the worker from what storage hands it.

Order: never-store screening (an incomplete screening rejects too) → exact duplicate → the
scope's admission rules (mode, the event types always held, the trust class required) → the
forgotten-content guard. The trust class is assigned here (:func:`trust_class`), never taken
from the caller: ``signed`` or ``earned`` when the evidence's attestation verifies under a key
the scope registers now, else ``asserted``. A policy the worker cannot read (``None``) never
admits. docs/admission.md describes the whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_core.attestation import AttestationInvalid, is_bound_attestation, verify_attestation
from admission_worker.screening import DEFAULT_BUDGET_SECONDS, INCOMPLETE, screen
from engram_core.policy import TRUST_CLASSES, ScopePolicy


@dataclass(frozen=True)
class Decision:
    decision: str  # accept | reject | pending_adjudication | duplicate_exact
    reason: str
    trust: str = "asserted"


def decide(
    payload: dict[str, Any],
    evidence: dict[str, Any],
    policy: ScopePolicy | None,
    *,
    duplicate_of_record_id: str,
    matches_forgotten: bool,
    screening_budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    trust: str = "asserted",
    tenant: str = "",
    workspace: str = "",
) -> Decision:
    found = screen(payload, _screened_evidence(payload, evidence, tenant, workspace),
                   budget_seconds=screening_budget_seconds)
    if found == INCOMPLETE:
        return Decision("reject", INCOMPLETE)
    if found is not None:
        return Decision("reject", f"never_store:{found}")
    if duplicate_of_record_id:
        return Decision("duplicate_exact", "duplicate")
    if policy is None:
        return Decision("pending_adjudication", "policy_unknown")
    rules = policy.admission
    if rules.mode == "reject_all":
        return Decision("reject", "policy")
    if rules.mode == "require_adjudication":
        return Decision("pending_adjudication", "policy")
    if (payload.get("primary_event") or {}).get("type_ref") in rules.adjudicate_types:
        return Decision("pending_adjudication", "policy_type")
    if TRUST_CLASSES.index(trust) < TRUST_CLASSES.index(rules.require_trust):
        if rules.below_trust == "adjudicate":
            return Decision("pending_adjudication", "trust_below_required", trust)
        return Decision("reject", "trust_below_required", trust)
    if matches_forgotten:
        return Decision("pending_adjudication", "forgotten_content")
    return Decision("accept", "policy", trust)


def trust_class(payload: dict[str, Any], evidence: dict[str, Any], policy: ScopePolicy | None, *,
                tenant: str, workspace: str) -> str:
    """The candidate's trust class: its attestation verified under the scope's keys as they are
    now (a key removed since the capture no longer vouches), else ``asserted``."""
    token = evidence.get("attestation")
    if not isinstance(token, str) or policy is None:
        return "asserted"
    try:
        return verify_attestation(token, policy.attester_keys, tenant=tenant, workspace=workspace,
                                  payload=payload, evidence_digest=evidence.get("evidence_digest", ""))
    except AttestationInvalid:
        return "asserted"


def _screened_evidence(payload: dict[str, Any], evidence: dict[str, Any], tenant: str, workspace: str) -> dict[str, Any]:
    """The evidence screening reads: all of it, but an attestation of this exact scope and
    content (a signed JWS of digests, not a secret) is left out; any other value is screened."""
    token = evidence.get("attestation")
    if token is not None and is_bound_attestation(token, tenant=tenant, workspace=workspace, payload=payload,
                                                  evidence_digest=evidence.get("evidence_digest", "")):
        return {k: v for k, v in evidence.items() if k != "attestation"}
    return evidence
