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


def check_model(model: str) -> str:
    if not is_digest(model):
        raise EngramError(Code.INVALID_SCHEMA)
    return model


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
            blob = self._d.vault.seal_derived(scope, rid, data_key, kind, latest[rid].vectors)
            writes.append(UpdateOne({"_id": rid}, {"$set": {"scope": scope.key, "model": model, "blob": blob}},
                                    upsert=True))
        if writes:
            await self._d.store.vectors.bulk_write(writes, ordered=False)
        return len(writes)

    async def opened(self, scope: Scope, model: str, record_keys: dict[str, bytes]) -> dict[str, bytes]:
        """The stored vectors of ``model`` for the records of ``record_keys`` (record id → its
        unwrapped data key), by record id; one that does not open is left out (and embedded
        again by the caller)."""
        check_model(model)
        docs = await find_by_ids(self._d.store.vectors, list(record_keys), {"scope": scope.key, "model": model})
        kind = vectors_kind(model)
        out: dict[str, bytes] = {}
        for rid, doc in docs.items():
            try:
                out[rid] = self._d.vault.open_derived(scope, rid, kind, doc.get("blob") or {}, record_keys[rid])
            except EngramError:
                log.warning("stored vectors do not open: record ignored, it is embedded again")
        return out


def _well_formed(vectors: bytes) -> bool:
    return 0 < len(vectors) <= MAX_RECORD_VECTOR_BYTES and len(vectors) % FLOAT_BYTES == 0
