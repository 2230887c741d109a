"""The semantic channel's window vectors, kept beside the records they were computed from.

Embedding is the dearest part of building a search projection with the semantic channel on
(~94 % of a cold rebuild's CPU, measured with py-spy), so a record is embedded once per model:
the first search replica that needs its vectors computes them and hands them to storage
(``StoreVectors``); every later build, on any replica, gets them with the record
(``FetchRecords.vector_model``). Every replica then also ranks with the same vectors.

They are sealed under the record's own data key (AAD: scope, record id and the kind
``vectors:<model digest>``), so the crypto-erasure that destroys the record's key erases them
too (:meth:`~storage_service.vault.Vault.destroy` deletes the document as well). Only an
``accepted_current`` record's vectors are taken. One document per record (``_id`` = record id):
another model's vectors replace the previous model's. It is a cache: written without the
journal fsync (:data:`~storage_service.store.CACHE_WRITES`), since losing it costs a
re-embedding, never an answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pymongo import UpdateOne

from engram_core.digests import is_digest
from engram_core.errors import Code, EngramError
from storage_service.deps import Deps
from storage_service.lifecycle import ACCEPTED_CURRENT
from storage_service.store import Scope, find_by_ids
from storage_service.vault import RECORD

log = logging.getLogger("engram.storage")

# At most this many records per StoreVectors call (as FetchRecords), and this many bytes of
# vectors per record (float32: a 384-dimension model's ~2,700 windows, far beyond SPEC §5's
# largest record).
MAX_ITEMS = 1000
MAX_RECORD_VECTOR_BYTES = 4 * 1024 * 1024
FLOAT_BYTES = 4


def vectors_kind(model: str) -> str:
    """The AAD kind the vectors of ``model`` are sealed with (binds the model's digest)."""
    return f"vectors:{model}"


def check_model(model: str) -> None:
    if not is_digest(model):
        raise EngramError(Code.INVALID_SCHEMA)


@dataclass(frozen=True)
class VectorItem:
    record_id: str
    vectors: bytes


class RecordVectors:
    def __init__(self, deps: Deps) -> None:
        self._d = deps

    async def store(self, scope: Scope, model: str, items: list[VectorItem]) -> int:
        """Seal and keep each item's vectors for ``model``; how many were kept (a record that
        is not ``accepted_current`` in ``scope``, or whose key is gone, is skipped)."""
        check_model(model)
        if len(items) > MAX_ITEMS or any(not _well_formed(item.vectors) for item in items):
            raise EngramError(Code.INVALID_SCHEMA)
        latest = {item.record_id: item for item in items}  # one write per record
        ids = list(latest)
        docs = await find_by_ids(self._d.store.records, ids, {"scope": scope.key, "state": ACCEPTED_CURRENT},
                                 {"_id": 1})
        keys = await self._d.vault.key_docs(scope, [rid for rid in ids if rid in docs])
        kind = vectors_kind(model)
        writes = []
        for rid in ids:
            key_doc = keys.get(rid)
            if rid not in docs or key_doc is None or "wrapped" not in key_doc:
                continue
            data_key = self._d.vault.data_key(scope, rid, RECORD, key_doc)
            blob = self._d.vault.seal_with_data_key(scope, rid, data_key, kind, latest[rid].vectors)
            writes.append(UpdateOne({"_id": rid}, {"$set": {"scope": scope.key, "model": model, "blob": blob}},
                                    upsert=True))
        if writes:
            await self._d.store.vectors.bulk_write(writes, ordered=False)
        return len(writes)

    async def sealed(self, scope: Scope, model: str, record_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The stored vector documents of ``model`` (a checked digest) for ``record_ids``, by
        record id (a few queries, not one per record); :meth:`open` each one sent."""
        return await find_by_ids(self._d.store.vectors, record_ids, {"scope": scope.key, "model": model})

    def open(self, scope: Scope, model: str, record_id: str, doc: dict[str, Any] | None, data_key: bytes) -> bytes:
        """A record's stored vectors under its unwrapped ``data_key``; b"" when none are stored
        or they do not open (the caller embeds the record again)."""
        if doc is None:
            return b""
        try:
            return self._d.vault.open_with_data_key(scope, record_id, vectors_kind(model), doc.get("blob") or {},
                                                    data_key)
        except EngramError:
            log.warning("stored vectors do not open: record ignored, it is embedded again")
            return b""


def _well_formed(vectors: bytes) -> bool:
    return 0 < len(vectors) <= MAX_RECORD_VECTOR_BYTES and len(vectors) % FLOAT_BYTES == 0
