"""One transition engine for every lifecycle move of a candidate or record (SPEC §6).

:meth:`Transitions.move` runs inside a journaled body (:mod:`storage_service.commits`): it
reads the object's state, asks the lifecycle table (:func:`storage_service.lifecycle.transition`:
an illegal move is refused before a cursor is taken), updates the object conditionally on the
state it read, appends the journal event and writes the move's declared effects as outbox rows.
Callers add what is theirs: the agent's mutations their ledger entry and receipt
(:mod:`storage_service.mutations`), the operator's moves theirs (:mod:`storage_service.operator`).

The effects are data:

- :data:`DESTROYS_KEY` — the object's data key is destroyed (crypto-erasure): withdraw, tombstone
  and expire — an expire unless the record's retention says ``derivative_rule: retain``
  (:mod:`storage_service.expiry`). A record that is only set aside (disputed, historical,
  trust-invalid) keeps its key: it may come back (resolve, rewind) or be audited until it is
  tombstoned.
- leaving ``accepted_current``, and every tombstone (whose answer reports the coverage of its
  removal) — the record is dropped from every search replica's memory (``INVALIDATE_PROJECTION``;
  replicas also drop it as they read the journal).
- tombstone — the keyed HMAC of its payload digest joins the scope's forgotten set (SPEC §10.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_core.errors import Code, EngramError
from engram_core.taskq import DESTROY_KEY, INVALIDATE_PROJECTION
from storage_service import outbox
from storage_service.commits import JournalTxn
from storage_service.deps import Deps
from storage_service.expiry import DERIVATIVE_RULE, EXPIRES_MS, RETAIN, SWEPT_STATES
from storage_service.journal import Event
from storage_service.lifecycle import ACCEPTED_CURRENT, transition

DESTROYS_KEY = frozenset({"withdraw", "tombstone", "expire"})
ALWAYS_INVALIDATES = frozenset({"tombstone"})
# Candidate moves; every other operation moves a record.
CANDIDATE_OPERATIONS = frozenset({"withdraw"})


@dataclass(frozen=True)
class Moved:
    object_id: str
    operation: str
    from_state: str
    to_state: str
    event: Event
    document: dict[str, Any]


def effects(operation: str, from_state: str, to_state: str, *, retain: bool = False) -> tuple[str, ...]:
    """The outbox tasks a move declares (in this order). ``retain``: the record's retention keeps
    its content past an expiry (``derivative_rule: retain``)."""
    tasks: list[str] = []
    if operation in DESTROYS_KEY and not (operation == "expire" and retain):
        tasks.append(DESTROY_KEY)
    if operation in ALWAYS_INVALIDATES or (from_state == ACCEPTED_CURRENT and to_state != ACCEPTED_CURRENT):
        tasks.append(INVALIDATE_PROJECTION)
    return tuple(tasks)


class Transitions:
    def __init__(self, deps: Deps) -> None:
        self._d = deps

    async def move(self, txn: JournalTxn, object_id: str, operation: str, binding: dict[str, Any], *,
                   to_state: str | None = None, fields: tuple[str, ...] = (),
                   extra: dict[str, Any] | None = None) -> Moved:
        """Move ``object_id`` of ``txn``'s scope by ``operation`` (to ``to_state`` where the table
        offers a choice). ``fields``: extra members of the object's document to return;
        ``extra``: members set on it with the state (ids and links, never content)."""
        d, scope, session = self._d, txn.scope, txn.session
        collection = d.store.candidates if operation in CANDIDATE_OPERATIONS else d.store.records
        projection = {"state": 1, "payload_digest": 1, DERIVATIVE_RULE: 1, **{name: 1 for name in fields}}
        doc = await collection.find_one({"_id": object_id, "scope": scope.key}, projection, session=session)
        if doc is None:
            raise EngramError(Code.NOT_FOUND)
        from_state = doc["state"]
        target = transition(operation, from_state, to_state)
        update: dict[str, Any] = {"$set": {"state": target, **(extra or {})}}
        if operation == "withdraw":
            update["$unset"] = {"blob": ""}
        elif target not in SWEPT_STATES:
            update["$unset"] = {EXPIRES_MS: ""}  # no longer the sweeper's (its index skips it)
        changed = await collection.update_one({"_id": object_id, "state": from_state}, update, session=session)
        if changed.matched_count != 1:  # moved meanwhile (the group re-runs on a write conflict)
            raise EngramError(Code.ILLEGAL_TRANSITION)
        event = txn.append(operation, object_id, from_state, target, binding)
        if operation == "tombstone":
            forgotten = d.forgotten_id(scope, doc["payload_digest"])
            await d.store.forgotten.update_one({"_id": forgotten}, {"$setOnInsert": {"scope": scope.key}},
                                               upsert=True, session=session)
        for task in effects(operation, from_state, target, retain=doc.get(DERIVATIVE_RULE) == RETAIN):
            await outbox.enqueue(d.store, session, task, scope, object_id)
        return Moved(object_id, operation, from_state, target, event, doc)
