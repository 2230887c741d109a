"""The admission decision (SPEC §10), made inside the worker from what storage hands it.

Order: never-store screening → exact duplicate → the scope's admission rules → the forgotten-
content guard. Trust class: ``asserted`` until attester keys and evidence verifiers exist
(a later issue); it is assigned here, never taken from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from admission_worker.screening import find_secret

ADMISSION_MODES = ("auto_accept", "require_adjudication", "reject_all")


@dataclass(frozen=True)
class Decision:
    decision: str  # accept | reject | pending_adjudication | duplicate_exact
    reason: str
    trust: str = "asserted"


def decide(
    payload: dict[str, Any],
    evidence: dict[str, Any],
    policy: dict[str, Any],
    *,
    duplicate_of_record_id: str,
    matches_forgotten: bool,
) -> Decision:
    secret = find_secret(payload, evidence)
    if secret is not None:
        return Decision("reject", f"never_store:{secret}")
    if duplicate_of_record_id:
        return Decision("duplicate_exact", "duplicate")
    mode = (policy.get("admission") or {}).get("mode", "auto_accept")
    if mode == "reject_all":
        return Decision("reject", "policy")
    if mode == "require_adjudication":
        return Decision("pending_adjudication", "policy")
    if mode != "auto_accept":
        # An unknown rule never admits by accident.
        return Decision("pending_adjudication", "policy_unknown")
    if matches_forgotten:
        return Decision("pending_adjudication", "forgotten_content")
    return Decision("accept", "policy")
