"""The per-scope journal (SPEC §3 cursors, §6): append-only, dense, hash-chained.

Every state change appends exactly one event in the same transaction. The cursor is taken by
incrementing the scope's head document inside that transaction, so concurrent writers of one
scope serialise on it (the loser's transaction is retried) and cursors stay gap-free: an
aborted transaction never consumes one. Events hold ids, states and digests only — never
content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import ReturnDocument

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


async def append(
    store: Store,
    session: Session,
    scope: Scope,
    operation: str,
    object_id: str,
    from_state: str | None,
    to_state: str,
    binding: dict[str, Any] | None = None,
) -> Event:
    """Append one event at the scope's next cursor. ``binding`` holds extra digests/ids the
    event commits to (e.g. the authorization receipt digest); never content."""
    head = await store.scopes.find_one_and_update(
        {"_id": scope.key},
        {"$inc": {"head": 1}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
        session=session,
    )
    cursor = int(head["head"])
    previous = head.get("head_digest") or GENESIS_DIGEST
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
            "previous_event_digest": previous,
            "at": at,
            "binding": binding or {},
        },
        "event_digest",
    )
    await store.journal.insert_one({"scope": scope.key, **body, "cursor": cursor}, session=session)
    await store.scopes.update_one({"_id": scope.key}, {"$set": {"head_digest": body["event_digest"]}}, session=session)
    return Event(body["event_id"], cursor, operation, object_id, from_state, to_state, body["event_digest"], at)


async def head_cursor(store: Store, scope: Scope, session: Session | None = None) -> int:
    doc = await store.scopes.find_one({"_id": scope.key}, {"head": 1}, session=session)
    return int(doc["head"]) if doc else 0


async def read(store: Store, scope: Scope, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """Events strictly after ``after`` in cursor order (at most ``limit``) and the head cursor
    read before them (so the head never runs ahead of what a reader can see)."""
    head = await head_cursor(store, scope)
    events = [
        doc
        async for doc in store.journal.find(
            {"scope": scope.key, "cursor": {"$gt": after, "$lte": head}}, {"_id": 0}
        ).sort("cursor", 1).limit(limit)
    ]
    return events, head


async def verify_chain(store: Store, scope: Scope) -> bool:
    """True when the scope's events are dense from 1 and each links to its predecessor's
    digest with a correct self-digest (an operator check; also used by the tests)."""
    expected_cursor, previous = 1, GENESIS_DIGEST
    async for doc in store.journal.find({"scope": scope.key}, {"_id": 0, "scope": 0}).sort("cursor", 1):
        body = {**doc, "cursor": str(doc["cursor"])}
        if doc["cursor"] != expected_cursor or body["previous_event_digest"] != previous:
            return False
        if not verify_digest_field("journal-event", body, "event_digest"):
            return False
        expected_cursor, previous = expected_cursor + 1, body["event_digest"]
    head = await store.scopes.find_one({"_id": scope.key})
    return (head is None and expected_cursor == 1) or (
        head is not None and head["head"] == expected_cursor - 1 and head.get("head_digest", GENESIS_DIGEST) == previous
    )
