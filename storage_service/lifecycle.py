"""The lifecycle state machine of SPEC §6, as data.

``transition(op, from_state)`` is the only place that decides whether a move is legal; it is
called before a journal cursor is taken, so an illegal move never consumes a cursor.
"""

from __future__ import annotations

from engram_core.errors import Code, EngramError

# Candidate states.
PENDING = "pending"
ACCEPTED = "accepted"
REJECTED = "rejected"
WITHDRAWN = "withdrawn"
CANDIDATE_TERMINAL = frozenset({REJECTED, WITHDRAWN})

# Record states.
ACCEPTED_CURRENT = "accepted_current"
ACCEPTED_DISPUTED = "accepted_disputed"
HISTORICAL = "historical"
EXPIRED = "expired"
TRUST_INVALID = "trust_invalid"
TOMBSTONED = "tombstoned"
RECORD_TERMINAL = frozenset({TOMBSTONED})
RECORD_STATES = frozenset(
    {ACCEPTED_CURRENT, ACCEPTED_DISPUTED, HISTORICAL, EXPIRED, TRUST_INVALID, TOMBSTONED}
)

TERMINAL = CANDIDATE_TERMINAL | RECORD_TERMINAL

# (operation, from_state) -> to_state. "capture" starts from nothing (None). "hold" records a
# pending_adjudication decision: a journal event that keeps the candidate pending.
TRANSITIONS: dict[tuple[str, str | None], str] = {
    ("capture", None): PENDING,
    ("accept", PENDING): ACCEPTED_CURRENT,
    ("reject", PENDING): REJECTED,
    ("duplicate", PENDING): REJECTED,
    ("hold", PENDING): PENDING,
    ("withdraw", PENDING): WITHDRAWN,
    ("dispute", ACCEPTED_CURRENT): ACCEPTED_DISPUTED,
    ("resolve_dispute", ACCEPTED_DISPUTED): ACCEPTED_CURRENT,
    ("supersede", ACCEPTED_CURRENT): HISTORICAL,
    ("supersede", ACCEPTED_DISPUTED): HISTORICAL,
    ("mark_non_current", ACCEPTED_CURRENT): HISTORICAL,
    ("mark_non_current", ACCEPTED_DISPUTED): HISTORICAL,
    ("rewind", HISTORICAL): ACCEPTED_CURRENT,
    ("expire", ACCEPTED_CURRENT): EXPIRED,
    ("expire", ACCEPTED_DISPUTED): EXPIRED,
    ("expire", HISTORICAL): EXPIRED,
    ("trust_invalidate", ACCEPTED_CURRENT): TRUST_INVALID,
    ("trust_invalidate", ACCEPTED_DISPUTED): TRUST_INVALID,
    ("trust_invalidate", HISTORICAL): TRUST_INVALID,
    ("tombstone", ACCEPTED_CURRENT): TOMBSTONED,
    ("tombstone", ACCEPTED_DISPUTED): TOMBSTONED,
    ("tombstone", HISTORICAL): TOMBSTONED,
    ("tombstone", EXPIRED): TOMBSTONED,
    ("tombstone", TRUST_INVALID): TOMBSTONED,
}
# resolve_dispute may also end historical; the operator chooses the target.
ALTERNATIVE_TARGETS: dict[tuple[str, str | None], frozenset[str]] = {
    ("resolve_dispute", ACCEPTED_DISPUTED): frozenset({ACCEPTED_CURRENT, HISTORICAL}),
}


def transition(operation: str, from_state: str | None, to_state: str | None = None) -> str:
    """The state ``operation`` moves ``from_state`` to.

    Raises ALREADY_TERMINAL when the object is in a terminal state (nothing leaves it) and
    ILLEGAL_TRANSITION for any other move the table does not list.
    """
    if from_state in TERMINAL:
        raise EngramError(Code.ALREADY_TERMINAL)
    key = (operation, from_state)
    target = TRANSITIONS.get(key)
    if target is None:
        raise EngramError(Code.ILLEGAL_TRANSITION)
    if to_state is None or to_state == target:
        return target
    if to_state in ALTERNATIVE_TARGETS.get(key, frozenset()):
        return to_state
    raise EngramError(Code.ILLEGAL_TRANSITION)
