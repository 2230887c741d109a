"""Envelope encryption (SPEC §11): one random AES-256-GCM data key per object, AAD binding
scope, object id and kind; data keys wrapped by the tenant's key-encryption key (KEK).

Development uses a file keyring (:class:`Keyring`); production plugs a KMS in behind the
:class:`KeyProvider` protocol. Destroying a data key makes its ciphertext unrecoverable.
Key material and plaintext never appear in exception messages.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from engram_core.canonical import canonicalize

NONCE_BYTES = 12
KEY_BYTES = 32


class CryptoError(ValueError):
    """Decryption or key unwrapping failed (wrong key, tampered data, destroyed key)."""

    def __init__(self) -> None:
        super().__init__("decryption failed")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def aad_for(tenant: str, workspace: str, object_id: str, kind: str) -> bytes:
    return canonicalize({"tenant": tenant, "workspace": workspace, "object_id": object_id, "kind": kind})


@dataclass(frozen=True)
class SealedBlob:
    nonce: bytes
    ciphertext: bytes

    def to_doc(self) -> dict[str, bytes]:
        return {"nonce": self.nonce, "ciphertext": self.ciphertext}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "SealedBlob":
        return cls(bytes(doc["nonce"]), bytes(doc["ciphertext"]))


@dataclass(frozen=True)
class WrappedKey:
    kek_id: str
    nonce: bytes
    ciphertext: bytes

    def to_doc(self) -> dict[str, Any]:
        return {"kek_id": self.kek_id, "nonce": self.nonce, "ciphertext": self.ciphertext}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "WrappedKey":
        return cls(str(doc["kek_id"]), bytes(doc["nonce"]), bytes(doc["ciphertext"]))


def seal(plaintext: bytes, aad: bytes) -> tuple[bytes, SealedBlob]:
    """Encrypt with a fresh data key; returns ``(data_key, blob)``."""
    data_key = AESGCM.generate_key(bit_length=256)
    return data_key, seal_with(data_key, plaintext, aad)


def seal_with(data_key: bytes, plaintext: bytes, aad: bytes) -> SealedBlob:
    """Encrypt under an existing data key (a fresh random nonce each time): what is derived
    from an object (its vectors) is sealed under the object's own key, so destroying that one
    key erases both."""
    nonce = os.urandom(NONCE_BYTES)
    return SealedBlob(nonce, AESGCM(data_key).encrypt(nonce, plaintext, aad))


def open_sealed(data_key: bytes, blob: SealedBlob, aad: bytes) -> bytes:
    try:
        return AESGCM(data_key).decrypt(blob.nonce, blob.ciphertext, aad)
    except (InvalidTag, ValueError):
        raise CryptoError() from None


class KeyProvider(Protocol):
    def wrap(self, tenant: str, data_key: bytes, aad: bytes) -> WrappedKey: ...

    def unwrap(self, tenant: str, wrapped: WrappedKey, aad: bytes) -> bytes: ...

    def hmac_key(self, tenant: str, purpose: str) -> bytes: ...


class Keyring:
    """Tenant KEKs from a JSON file: ``{"version": 1, "tenants": {t: {"kek_id", "key"}},
    "default": {"kek_id", "key"}}`` (keys: base64url of 32 bytes). A tenant without its own
    entry uses ``default`` — fine for development; production lists every tenant or uses a
    KMS-backed provider."""

    def __init__(self, tenants: dict[str, tuple[str, bytes]], default: tuple[str, bytes] | None) -> None:
        self._tenants = tenants
        self._default = default

    @staticmethod
    def _entry(doc: Any) -> tuple[str, bytes]:
        key = _unb64(doc["key"])
        if len(key) != KEY_BYTES or not doc.get("kek_id"):
            raise ValueError("keyring entry must have a kek_id and a 32-byte key")
        return str(doc["kek_id"]), key

    @classmethod
    def load(cls, path: str) -> "Keyring":
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
        if doc.get("version") != 1:
            raise ValueError("unsupported keyring version")
        tenants = {t: cls._entry(e) for t, e in (doc.get("tenants") or {}).items()}
        default = cls._entry(doc["default"]) if doc.get("default") else None
        return cls(tenants, default)

    @classmethod
    def ensure_dev_file(cls, path: str) -> "Keyring":
        """Load ``path``, creating it (mode 0600) with a random default KEK if missing."""
        if not os.path.exists(path):
            doc = {"version": 1, "tenants": {}, "default": {"kek_id": "dev-" + secrets.token_hex(4),
                                                             "key": _b64(os.urandom(KEY_BYTES))}}
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(doc, handle, indent=2)
        return cls.load(path)

    def kek_for(self, tenant: str) -> tuple[str, bytes]:
        entry = self._tenants.get(tenant, self._default)
        if entry is None:
            raise KeyError("no key-encryption key for this tenant")
        return entry

    def kek_by_id(self, kek_id: str) -> bytes:
        for entry in (*self._tenants.values(), *([self._default] if self._default else [])):
            if entry[0] == kek_id:
                return entry[1]
        raise KeyError("unknown key-encryption key")


class FileKeyProvider:
    """AES-256-GCM key wrapping with the keyring's KEKs."""

    def __init__(self, keyring: Keyring) -> None:
        self._keyring = keyring

    def wrap(self, tenant: str, data_key: bytes, aad: bytes) -> WrappedKey:
        kek_id, kek = self._keyring.kek_for(tenant)
        nonce = os.urandom(NONCE_BYTES)
        return WrappedKey(kek_id, nonce, AESGCM(kek).encrypt(nonce, data_key, aad))

    def unwrap(self, tenant: str, wrapped: WrappedKey, aad: bytes) -> bytes:
        try:
            kek = self._keyring.kek_by_id(wrapped.kek_id)
            return AESGCM(kek).decrypt(wrapped.nonce, wrapped.ciphertext, aad)
        except (InvalidTag, KeyError, ValueError):
            raise CryptoError() from None

    def hmac_key(self, tenant: str, purpose: str) -> bytes:
        """A per-tenant key for keyed digests (e.g. the forgotten-content set), derived from
        the tenant's KEK so it never needs storing."""
        _, kek = self._keyring.kek_for(tenant)
        return hmac.new(kek, b"engram/hmac-key/v1\x00" + purpose.encode("utf-8"), hashlib.sha256).digest()
