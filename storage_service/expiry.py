"""What a record keeps of its retention in clear (SPEC §5 retention, §6 ``expire``): when it
expires and what its derivative rule is — metadata the sweeper needs, never content.

- ``expires_ms`` — ``retention.expires_at`` as epoch milliseconds, present only while the record
  is in a state the sweeper may expire (:data:`SWEPT_STATES`): the transition engine unsets it
  on any other move, so the sparse index the sweep walks holds only what is owed.
- ``derivative_rule`` — ``make-ineligible`` (the default) or ``retain``. Both take an expired
  record out of every read (search, get) at once. ``make-ineligible`` also destroys its data key:
  nothing can be derived from it again. ``retain`` (only with the scope's ``retain_allowed``)
  keeps the ciphertext and its key, for an operator's audit or export, until a tombstone.
"""

from __future__ import annotations

from typing import Any

from engram_core.timefmt import parse_instant
from storage_service.lifecycle import ACCEPTED_CURRENT, ACCEPTED_DISPUTED, HISTORICAL

EXPIRES_MS = "expires_ms"
DERIVATIVE_RULE = "derivative_rule"
RETAIN = "retain"
MAKE_INELIGIBLE = "make-ineligible"
# The states ``expire`` leaves (SPEC §6).
SWEPT_STATES = frozenset({ACCEPTED_CURRENT, ACCEPTED_DISPUTED, HISTORICAL})


def expiry_fields(retention: dict[str, Any]) -> dict[str, Any]:
    """The record document's retention members, from the resolved retention."""
    fields: dict[str, Any] = {DERIVATIVE_RULE: retention.get(DERIVATIVE_RULE, MAKE_INELIGIBLE)}
    if "expires_at" in retention:
        fields["expires_at"] = retention["expires_at"]
        fields[EXPIRES_MS] = parse_instant(retention["expires_at"])
    return fields
