"""Reads: one eligible record for get, records and journal events for the search projection.

``get`` answers NOT_FOUND alike for an unknown id, another scope's id and a record that is not
currently eligible (SPEC §1.2, §5): each is one indexed lookup by ``(_id, scope)`` and no
decryption, so the three are not told apart by content or timing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engram_core.errors import Code, EngramError
from engram_core.timefmt import now_ms
from storage_service import journal
from storage_service.deps import Deps
from storage_service.lifecycle import ACCEPTED_CURRENT
from storage_service.records import eligible_now, projection
from storage_service.store import Scope
from storage_service.vault import RECORD

MAX_FETCH = 1000
MAX_JOURNAL_BATCH = 1000


@dataclass(frozen=True)
class ReadRecord:
    record: dict[str, Any]
    valid_as_of_ms: int
    head_cursor: int


class Reads:
    def __init__(self, deps: Deps) -> None:
        self._d = deps

    async def _open(self, scope: Scope, doc: dict[str, Any]) -> dict[str, Any]:
        content = json.loads(await self._d.vault.open(scope, doc["_id"], RECORD, doc.get("blob") or {}))
        return projection(content, trust=doc["trust"], recorded_at=doc["recorded_at"])

    async def get(self, scope: Scope, record_id: str) -> ReadRecord:
        head = await journal.head_cursor(self._d.store, scope)
        now = now_ms()
        doc = await self._d.store.records.find_one({"_id": record_id, "scope": scope.key})
        if doc is None or doc["state"] != ACCEPTED_CURRENT or not eligible_now(doc, now):
            raise EngramError(Code.NOT_FOUND)
        return ReadRecord(await self._open(scope, doc), now, head)

    async def fetch(self, scope: Scope, record_ids: list[str]) -> list[tuple[str, str, dict[str, Any] | None]]:
        """``(record_id, state, record or None)`` for each id of the scope; content only for
        ``accepted_current`` records."""
        if len(record_ids) > MAX_FETCH:
            raise EngramError(Code.INVALID_SCHEMA)
        out: list[tuple[str, str, dict[str, Any] | None]] = []
        async for doc in self._d.store.records.find({"_id": {"$in": list(record_ids)}, "scope": scope.key}):
            record = await self._open(scope, doc) if doc["state"] == ACCEPTED_CURRENT else None
            out.append((doc["_id"], doc["state"], record))
        return out

    async def journal(self, scope: Scope, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        limit = max(1, min(limit or MAX_JOURNAL_BATCH, MAX_JOURNAL_BATCH))
        return await journal.read(self._d.store, scope, after, limit)
