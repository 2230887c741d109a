"""The admission decision (SPEC §10), made inside the worker from what storage hands it.

Order: never-store screening → exact duplicate → the scope's admission rules (mode, the event
types always held, the trust class required) → the forgotten-content guard. Trust class:
``asserted`` until attester keys and evidence verifiers exist (a later issue); it is assigned
here, never taken from the caller. A policy the worker cannot read (``None``) never admits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from admission_worker.screening import find_secret
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
) -> Decision:
    secret = find_secret(payload, evidence)
    if secret is not None:
        return Decision("reject", f"never_store:{secret}")
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
    trust = "asserted"
    if TRUST_CLASSES.index(trust) < TRUST_CLASSES.index(rules.require_trust):
        if rules.below_trust == "adjudicate":
            return Decision("pending_adjudication", "trust_below_required", trust)
        return Decision("reject", "trust_below_required", trust)
    if matches_forgotten:
        return Decision("pending_adjudication", "forgotten_content")
    return Decision("accept", "policy", trust)
