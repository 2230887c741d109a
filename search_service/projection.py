"""Per-scope search projections, kept current by tailing the storage journal.

A projection holds the scope's ``accepted_current`` records (decrypted, in memory) in a
lexical index. Before every answer it catches up to the journal head, so a record that left
``accepted_current`` (forget, expiry, …) is gone before the next search answers, and the
answer can name the cursor it is valid through. A fresh replica builds each scope lazily from
the journal on first use.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import grpc

from engram_api.common.v1 import common_pb2
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import error_from_rpc
from engram_core.timefmt import parse_instant
from search_service.analyzer import DEFAULT_LANGUAGE
from search_service.doctable import DocTable
from search_service.lexical import FloatArray, LexicalIndex, fields_of
from search_service.ranking import DocMeta

JOURNAL_BATCH = 1000
ACCEPTED = "accepted_current"


COMPACT_MIN_DEAD = 1024


@dataclass
class ScopeProjection:
    """One scope's ``accepted_current`` records: the JSON (for packets), the slot table and the
    lexical index over it. Hold ``lock`` for every read and write."""

    index: LexicalIndex = field(default_factory=LexicalIndex)
    table: DocTable = field(default_factory=DocTable)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    cursor: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def add(self, record: dict[str, Any], cursor: int) -> None:
        """Index ``record`` as accepted at journal ``cursor`` (replacing an older version)."""
        record_id = record["record_id"]
        retention = record.get("retention") or {}
        expires = retention.get("expires_at")
        meta = DocMeta(
            record_id=record_id,
            valid_from_ms=record["valid_time"]["t"],
            valid_to_ms=record["valid_time"].get("t_end"),
            expires_at_ms=parse_instant(expires) if expires else None,
        )
        fields = fields_of(record)
        self.remove(record_id)
        slot = self.table.add(meta, cursor)
        self.index.add(slot, fields)
        self.records[record_id] = record

    def remove(self, record_id: str) -> bool:
        """Drop a record from every surface; returns whether it was here."""
        record = self.records.pop(record_id, None)
        slot = self.table.remove(record_id)
        if slot is None or record is None:
            return False
        self.index.remove(slot, fields_of(record))
        if self.table.dead >= max(COMPACT_MIN_DEAD, len(self.table)):
            self.index.remap(self.table.compact(), self.table.size)
        return True

    def scores(self, query: str) -> FloatArray:
        """The lexical channel's score per table slot."""
        return self.index.scores(query, self.table.size)


@dataclass(frozen=True)
class ScopeView:
    policy: dict[str, Any]
    head: int


class Projections:
    """All scopes this replica has served."""

    def __init__(self, storage: storage_pb2_grpc.StorageServiceStub, rpc_seconds: float) -> None:
        self._storage = storage
        self._rpc_seconds = rpc_seconds
        self._scopes: dict[tuple[str, str], ScopeProjection] = {}

    def peek(self, tenant: str, workspace: str) -> ScopeProjection | None:
        return self._scopes.get((tenant, workspace))

    async def current(self, tenant: str, workspace: str, language: str = DEFAULT_LANGUAGE,
                      head: int | None = None) -> ScopeProjection:
        """The scope's projection in the scope's search ``language``, caught up with the journal
        head. Hold ``.lock`` to read it. A language change starts a fresh projection (every
        record is analysed anew). ``head``: the journal head just read (with the policy); a
        projection already there reads no journal (an idle search costs one storage call)."""
        projection = self._scopes.get((tenant, workspace))
        if projection is None or projection.index.language != language:
            projection = self._scopes[(tenant, workspace)] = ScopeProjection(LexicalIndex(language))
        async with projection.lock:
            if head is None or projection.cursor < head:
                await self._catch_up(common_pb2.Scope(tenant=tenant, workspace=workspace), projection)
        return projection

    async def policy(self, tenant: str, workspace: str) -> ScopeView:
        """The scope's operator policy (language, redaction allowlist, …) and journal head."""
        reply = await self._call(
            self._storage.GetScopePolicy,
            storage_pb2.GetScopePolicyRequest(scope=common_pb2.Scope(tenant=tenant, workspace=workspace),
                                              with_head_cursor=True),
        )
        return ScopeView(json.loads(reply.policy_json), int(reply.head_cursor or "0"))

    async def _catch_up(self, scope: common_pb2.Scope, projection: ScopeProjection) -> None:
        while True:
            reply = await self._call(
                self._storage.ReadJournal,
                storage_pb2.ReadJournalRequest(scope=scope, after_cursor=str(projection.cursor), limit=JOURNAL_BATCH),
            )
            to_fetch: dict[str, int] = {}
            for event in reply.events:
                cursor = int(event.cursor)
                if event.to_state == ACCEPTED:
                    to_fetch[event.object_id] = cursor
                elif event.object_id in projection.records or event.object_id in to_fetch:
                    to_fetch.pop(event.object_id, None)
                    projection.remove(event.object_id)
            if to_fetch:
                await self._fetch(scope, projection, to_fetch)
            if reply.events:
                projection.cursor = int(reply.events[-1].cursor)
            if not reply.events or projection.cursor >= int(reply.head_cursor or "0"):
                return

    async def _fetch(self, scope: common_pb2.Scope, projection: ScopeProjection, ids: dict[str, int]) -> None:
        """Fetch and index ``ids`` (record id → accepted cursor); storage answers at most 4 MiB
        per reply and defers the rest, which is asked for again until none is left."""
        wanted = list(ids)
        while wanted:
            reply = await self._call(
                self._storage.FetchRecords, storage_pb2.FetchRecordsRequest(scope=scope, record_ids=wanted)
            )
            for item in reply.records:
                if item.state == ACCEPTED and item.record_json:
                    projection.add(json.loads(item.record_json), ids[item.record_id])
            deferred = list(reply.deferred_ids)
            if len(deferred) >= len(wanted):
                raise EngramError(Code.PROJECTION_STALE)  # no progress: never loop forever
            wanted = deferred

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self._rpc_seconds)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
