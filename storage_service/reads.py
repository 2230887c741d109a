"""Reads: one eligible record for get, records and journal events for the search projection.

``get`` answers NOT_FOUND alike for an unknown id, another scope's id and a record that is not
currently eligible (SPEC §1.2, §5): each is one indexed lookup by ``(_id, scope)`` and no
decryption, so the three are not told apart by content or timing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError
from storage_service import journal
from storage_service.deps import Deps
from storage_service.lifecycle import ACCEPTED_CURRENT
from storage_service.records import eligible_now, stored_projection
from storage_service.store import Scope, find_by_ids
from storage_service.vault import RECORD
from storage_service.vectors import RecordVectors, check_model

MAX_FETCH = 1000
MAX_JOURNAL_BATCH = 1000
# Bytes of record JSON and vectors in one FetchRecords reply (well below the 16 MiB gRPC message limit):
# the ids beyond it are answered as deferred, and the caller asks for them again.
MAX_FETCH_REPLY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Fetched:
    """``records``: ``(record_id, state, canonical record JSON or b"", stored vectors or b"")``
    per found id of the scope (content and vectors only for ``accepted_current``);
    ``deferred``: ids left for the next call."""

    records: list[tuple[str, str, bytes, bytes]]
    deferred: list[str]


@dataclass(frozen=True)
class ReadRecord:
    record: dict[str, Any]
    valid_as_of_ms: int
    head_cursor: int


def _projected(content: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    return stored_projection(content, record_id=doc["_id"], digest=doc["record_digest"], trust=doc["trust"],
                             recorded_at=doc["recorded_at"])


class Reads:
    def __init__(self, deps: Deps) -> None:
        self._d = deps
        self._vectors = RecordVectors(deps)

    async def _open(self, scope: Scope, doc: dict[str, Any]) -> dict[str, Any]:
        content = json.loads(await self._d.vault.open(scope, doc["_id"], RECORD, doc.get("blob") or {}))
        return _projected(content, doc)

    async def get(self, scope: Scope, record_id: str, head: int | None = None) -> ReadRecord:
        """``head``: the scope's journal head when the caller read it already (with the policy)."""
        head = head if head is not None else await journal.head_cursor(self._d.store, scope)
        now = self._d.clock()
        doc = await self._d.store.records.find_one({"_id": record_id, "scope": scope.key})
        if doc is None or doc["state"] != ACCEPTED_CURRENT or not eligible_now(doc, now):
            raise EngramError(Code.NOT_FOUND)
        return ReadRecord(await self._open(scope, doc), now, head)

    async def fetch(self, scope: Scope, record_ids: list[str], max_bytes: int = MAX_FETCH_REPLY_BYTES,
                    vector_model: str = "") -> Fetched:
        """The records of ``record_ids`` in request order, up to ``max_bytes`` of record JSON
        and vectors (at least one record per reply); the records, their data keys and (with
        ``vector_model``) their stored vectors, each read by id in a few queries
        (:func:`~storage_service.store.find_by_ids`), never one per record."""
        if len(record_ids) > MAX_FETCH:
            raise EngramError(Code.INVALID_SCHEMA)
        if vector_model:
            check_model(vector_model)
        docs = await find_by_ids(self._d.store.records, list(record_ids), {"scope": scope.key})
        accepted = [rid for rid in record_ids if rid in docs and docs[rid]["state"] == ACCEPTED_CURRENT]
        keys = await self._d.vault.key_docs(scope, accepted)
        sealed = await self._vectors.sealed(scope, vector_model, accepted) if vector_model else {}
        out: list[tuple[str, str, bytes, bytes]] = []
        size = 0
        for position, rid in enumerate(record_ids):
            doc = docs.get(rid)
            if doc is None:
                continue
            body = stored = b""
            if doc["state"] == ACCEPTED_CURRENT:
                # One unwrap opens the record and its stored vectors; a record deferred to the
                # next reply is opened then, not now.
                data_key = self._d.vault.data_key(scope, rid, RECORD, keys.get(rid))
                plaintext = self._d.vault.open_with_data_key(scope, rid, RECORD, doc.get("blob") or {}, data_key)
                body = canonicalize(_projected(json.loads(plaintext), doc))
                if vector_model:
                    stored = self._vectors.open(scope, vector_model, rid, sealed.get(rid), data_key)
            if out and size + len(body) + len(stored) > max_bytes:
                return Fetched(out, list(record_ids[position:]))
            out.append((rid, doc["state"], body, stored))
            size += len(body) + len(stored)
        return Fetched(out, [])

    async def journal(self, scope: Scope, after: int, limit: int) -> tuple[list[dict[str, Any]], int]:
        limit = max(1, min(limit or MAX_JOURNAL_BATCH, MAX_JOURNAL_BATCH))
        return await journal.read(self._d.store, scope, after, limit)
