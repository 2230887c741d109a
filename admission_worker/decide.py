"""The admission decision (SPEC §10), made inside the worker from what storage hands it.

Order: never-store screening (an incomplete screening rejects too) → exact duplicate → the scope's admission rules (mode, the event
types always held, the trust class required) → the forgotten-content guard. Trust class:
``asserted`` until attester keys and evidence verifiers exist (a later issue); it is assigned
here, never taken from the caller. A policy the worker cannot read (``None``) never admits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
) -> Decision:
    found = screen(payload, evidence, budget_seconds=screening_budget_seconds).detector
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
    trust = "asserted"
    if TRUST_CLASSES.index(trust) < TRUST_CLASSES.index(rules.require_trust):
        if rules.below_trust == "adjudicate":
            return Decision("pending_adjudication", "trust_below_required", trust)
        return Decision("reject", "trust_below_required", trust)
    if matches_forgotten:
        return Decision("pending_adjudication", "forgotten_content")
    return Decision("accept", "policy", trust)
