"""Encrypted objects and their data keys (SPEC §11).

Each candidate and each record is sealed with its own random AES-256-GCM data key; the AAD
binds scope, object id and kind. The data key is stored wrapped by the tenant's KEK in
``data_keys``. Destroying it (crypto-erasure) deletes the wrapped key and leaves a receipt;
the ciphertext is then unrecoverable and any later open fails (BLOB_MISSING).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from engram_core.crypto import CryptoError, KeyProvider, SealedBlob, WrappedKey, aad_for, open_sealed, seal, seal_with
from engram_core.digests import with_digest
from engram_core.errors import Code, EngramError
from engram_core.timefmt import format_instant, now_ms
from storage_service.store import Scope, Session, Store, find_by_ids

CANDIDATE = "candidate"
RECORD = "record"


class Vault:
    def __init__(self, store: Store, keys: KeyProvider) -> None:
        self._store = store
        self._keys = keys

    async def seal(self, session: Session, scope: Scope, object_id: str, kind: str, plaintext: bytes) -> dict[str, Any]:
        """Encrypt ``plaintext`` with a fresh data key, store the wrapped key; returns the blob
        document to store beside the object."""
        aad = aad_for(scope.tenant, scope.workspace, object_id, kind)
        data_key, blob = seal(plaintext, aad)
        wrapped = self._keys.wrap(scope.tenant, data_key, aad)
        await self._store.data_keys.insert_one(
            {"_id": object_id, "scope": scope.key, "kind": kind, "wrapped": wrapped.to_doc(),
             "created_at": datetime.now(timezone.utc)},
            session=session,
        )
        return blob.to_doc()

    async def open(self, scope: Scope, object_id: str, kind: str, blob_doc: dict[str, Any],
                   session: Session | None = None) -> bytes:
        """Decrypt an object; BLOB_MISSING when its key was destroyed or does not open it."""
        key_doc = await self._store.data_keys.find_one({"_id": object_id, "scope": scope.key}, session=session)
        return self._open_with(scope, object_id, kind, blob_doc, key_doc)

    async def key_docs(self, scope: Scope, object_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The data-key documents of many objects of one scope, by ``_id`` (a few queries, not
        one per object)."""
        return await find_by_ids(self._store.data_keys, object_ids, {"scope": scope.key})

    def _open_with(self, scope: Scope, object_id: str, kind: str, blob_doc: dict[str, Any],
                   key_doc: dict[str, Any] | None) -> bytes:
        if not blob_doc:
            raise EngramError(Code.BLOB_MISSING)
        return self.open_with_data_key(scope, object_id, kind, blob_doc, self.data_key(scope, object_id, kind, key_doc))

    def data_key(self, scope: Scope, object_id: str, kind: str, key_doc: dict[str, Any] | None) -> bytes:
        """The object's unwrapped data key (kept in memory only for the call that needs it);
        BLOB_MISSING when it was destroyed or does not unwrap."""
        if key_doc is None or "wrapped" not in key_doc:
            raise EngramError(Code.BLOB_MISSING)
        try:
            return self._keys.unwrap(scope.tenant, WrappedKey.from_doc(key_doc["wrapped"]),
                                     aad_for(scope.tenant, scope.workspace, object_id, kind))
        except CryptoError:
            raise EngramError(Code.BLOB_MISSING) from None

    @staticmethod
    def seal_with_data_key(scope: Scope, object_id: str, data_key: bytes, kind: str, plaintext: bytes) -> dict[str, Any]:
        """Seal under an object's unwrapped data key (what was derived from the object, ``kind``:
        e.g. its vectors), so the key's destruction erases it with the object."""
        return seal_with(data_key, plaintext, aad_for(scope.tenant, scope.workspace, object_id, kind)).to_doc()

    @staticmethod
    def open_with_data_key(scope: Scope, object_id: str, kind: str, blob_doc: dict[str, Any], data_key: bytes) -> bytes:
        """Open a blob sealed under ``data_key`` with the AAD of ``kind``; BLOB_MISSING when it
        does not open (another key, another kind or object, altered)."""
        try:
            return open_sealed(data_key, SealedBlob.from_doc(blob_doc), aad_for(scope.tenant, scope.workspace,
                                                                                 object_id, kind))
        except (CryptoError, KeyError, TypeError):
            raise EngramError(Code.BLOB_MISSING) from None

    async def destroy(self, object_id: str, scope_key: str, session: Session | None = None) -> str:
        """Destroy the object's data key (idempotent); returns the key-destruction receipt
        digest (the first destruction's, on every repeat). ``session``: inside that transaction
        (a decision destroys its candidate's key as it commits)."""
        key_doc = await self._store.data_keys.find_one({"_id": object_id, "scope": scope_key}, session=session)
        if key_doc is None:
            raise EngramError(Code.NOT_FOUND)
        if "receipt_digest" in key_doc:
            return str(key_doc["receipt_digest"])
        receipt = with_digest(
            "key-destruction",
            {
                "object_id": object_id,
                "scope_digest": scope_key,
                "kind": key_doc["kind"],
                "kek_id": key_doc["wrapped"]["kek_id"],
                "destroyed_at": format_instant(now_ms()),
            },
            "receipt_digest",
        )
        # A conditional update, not findAndModify: SecantusDB scans the whole collection for a
        # findAndModify that matches (docs/storage.md). Equality on null matches the missing field.
        done = await self._store.data_keys.update_one(
            {"_id": object_id, "receipt_digest": None},
            {"$unset": {"wrapped": ""}, "$set": {"receipt_digest": receipt["receipt_digest"],
                                                 "destroyed_at": receipt["destroyed_at"]}},
            session=session,
        )
        if key_doc["kind"] == RECORD:
            # What was sealed under the record's key is unreadable now; its documents go too.
            await self._store.vectors.delete_one({"_id": object_id}, session=session)
        if done.matched_count == 0:  # a concurrent destruction won: report its receipt
            again = await self._store.data_keys.find_one({"_id": object_id}, {"receipt_digest": 1}, session=session)
            return str(again["receipt_digest"])
        return str(receipt["receipt_digest"])

    async def destroyed(self, object_id: str, session: Session | None = None) -> bool:
        doc = await self._store.data_keys.find_one({"_id": object_id}, {"receipt_digest": 1}, session=session)
        return doc is not None and "receipt_digest" in doc
