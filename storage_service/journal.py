"""The per-scope journal (SPEC §3 cursors, §6): append-only, dense, hash-chained.

Every state change appends exactly one event in the same transaction. The scope's head
document holds the last cursor and event digest; the writes of a scope commit in groups (one
transaction, one head update: :mod:`storage_service.commits`), so cursors stay gap-free — an
aborted transaction never consumes one. Events hold ids, states and digests only — never
content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_core.digests import verify_digest_field, with_digest
from engram_core.ids import new_event_id
from engram_core.timefmt import format_instant, now_ms
from storage_service.store import Scope, Session, Store

GENESIS_DIGEST = "sha256:" + "0" * 64


@dataclass(frozen=True)
class Event:
    event_id: str
    cursor: int
    operation: str
    object_id: str
    from_state: str | None
    to_state: str
    event_digest: str
    at: str

    @property
    def cursor_text(self) -> str:
        return str(self.cursor)


def build_event(scope: Scope, cursor: int, previous_digest: str, operation: str, object_id: str,
                from_state: str | None, to_state: str, binding: dict[str, Any] | None = None) -> tuple[dict[str, Any], Event]:
    """The stored document and the :class:`Event` of one journal event at ``cursor``, chained
    to ``previous_digest``. ``binding`` holds extra digests/ids the event commits to (e.g. the
    authorization receipt digest); never content. Appending is the group committer's
    (:mod:`storage_service.commits`)."""
    at = format_instant(now_ms())
    body = with_digest(
        "journal-event",
        {
            "scope_digest": scope.key,
            "cursor": str(cursor),
            "event_id": new_event_id(),
            "operation": operation,
            "object_id": object_id,
            "from_state": from_state or "",
            "to_state": to_state,
            "previous_event_digest": previous_digest,
            "at": at,
            "binding": binding or {},
        },
        "event_digest",
    )
    event = Event(body["event_id"], cursor, operation, object_id, from_state, to_state, body["event_digest"], at)
    return {"scope": scope.key, **body, "cursor": cursor}, event


async def head_cursor(store: Store, scope: Scope, session: Session | None = None) -> int:
    doc = await store.scopes.find_one({"_id": scope.key}, {"head": 1}, session=session)
    return int(doc.get("head", 0)) if doc else 0


async def read(store: Store, scope: Scope, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Events strictly after ``after`` in cursor order (at most ``limit``) and the head cursor
    read before them (so the head never runs ahead of what a reader can see)."""
    head = await head_cursor(store, scope)
    # Cursors are dense: the page is exactly (after, after + limit], a bounded index range (an
    # open-ended one would make the server examine every later event before the limit).
    events = [
        doc
        async for doc in store.journal.find(
            {"scope": scope.key, "cursor": {"$gt": after, "$lte": min(head, after + limit)}}, {"_id": 0}
        ).sort("cursor", 1).limit(limit)
    ]
    return events, head


@dataclass(frozen=True)
class Verified:
    """The result of walking a scope's hash chain: ``events`` checked, the ``head`` the scope
    document names, and where it first breaks (``first_bad_cursor``, 0 when intact) and how
    (``problem``: gap, link, digest, head)."""

    events: int
    head: int
    first_bad_cursor: int = 0
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


async def verify(store: Store, scope: Scope) -> Verified:
    """Walk the scope's events in cursor order: dense from 1, each linked to its predecessor's
    digest, each self-digest correct, and the head document naming the last one."""
    expected_cursor, previous = 1, GENESIS_DIGEST
    head_doc = await store.scopes.find_one({"_id": scope.key}, {"head": 1, "head_digest": 1}) or {}
    head = int(head_doc.get("head", 0))
    async for doc in store.journal.find({"scope": scope.key}, {"_id": 0, "scope": 0}).sort("cursor", 1):
        body = {**doc, "cursor": str(doc["cursor"])}
        if doc["cursor"] != expected_cursor:
            return Verified(expected_cursor - 1, head, expected_cursor, "gap")
        if body.get("previous_event_digest") != previous:
            return Verified(expected_cursor - 1, head, expected_cursor, "link")
        if not verify_digest_field("journal-event", body, "event_digest"):
            return Verified(expected_cursor - 1, head, expected_cursor, "digest")
        expected_cursor, previous = expected_cursor + 1, body["event_digest"]
    if head != expected_cursor - 1 or head_doc.get("head_digest", GENESIS_DIGEST) != previous:
        return Verified(expected_cursor - 1, head, expected_cursor, "head")
    return Verified(expected_cursor - 1, head)


async def verify_chain(store: Store, scope: Scope) -> bool:
    """True when the scope's hash chain verifies (see :func:`verify`)."""
    return (await verify(store, scope)).ok


HISTORY_FIELDS = ("cursor", "event_id", "operation", "object_id", "from_state", "to_state", "at", "event_digest")


async def history(store: Store, scope: Scope, object_ids: list[str], limit: int = 1000) -> list[dict[str, Any]]:
    """The events of ``object_ids`` in the scope, in cursor order (ids, states, times, digests,
    and who moved it: ``agent``, ``worker`` or ``operator``)."""
    found = []
    query = {"scope": scope.key, "object_id": {"$in": object_ids}}
    fields = {**{name: 1 for name in HISTORY_FIELDS}, "binding": 1}
    async for doc in store.journal.find(query, fields).sort("cursor", 1).limit(limit):
        binding = doc.get("binding") or {}
        actor = binding.get("actor") or ("worker" if "decision" in binding else "agent")
        found.append({**{name: doc.get(name, "") for name in HISTORY_FIELDS}, "cursor": str(doc["cursor"]),
                      "actor": actor})
    return found
