"""Envelope encryption: per-object data keys, AAD binding, KEK wrapping, the file keyring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_core.crypto import CryptoError, FileKeyProvider, Keyring, aad_for, open_sealed, seal


def provider(tmp_path: Path) -> FileKeyProvider:
    return FileKeyProvider(Keyring.ensure_dev_file(str(tmp_path / "keyring.json")))


def test_seal_open_round_trip_and_fresh_keys() -> None:
    aad = aad_for("t", "w", "cand_x", "candidate")
    key1, blob1 = seal(b"secret text", aad)
    key2, blob2 = seal(b"secret text", aad)
    assert key1 != key2 and blob1.ciphertext != blob2.ciphertext and len(key1) == 32
    assert b"secret" not in blob1.ciphertext
    assert open_sealed(key1, blob1, aad) == b"secret text"


@pytest.mark.parametrize("other", [("t2", "w", "cand_x", "candidate"), ("t", "w2", "cand_x", "candidate"),
                                   ("t", "w", "cand_y", "candidate"), ("t", "w", "cand_x", "record")])
def test_aad_binds_scope_object_and_kind(other: tuple[str, str, str, str]) -> None:
    key, blob = seal(b"bound", aad_for("t", "w", "cand_x", "candidate"))
    with pytest.raises(CryptoError):
        open_sealed(key, blob, aad_for(*other))


def test_tampered_ciphertext_fails() -> None:
    aad = aad_for("t", "w", "o", "record")
    key, blob = seal(b"payload", aad)
    flipped = type(blob)(blob.nonce, bytes([blob.ciphertext[0] ^ 1]) + blob.ciphertext[1:])
    with pytest.raises(CryptoError):
        open_sealed(key, flipped, aad)


def test_wrap_unwrap_with_the_tenant_kek(tmp_path: Path) -> None:
    keys = provider(tmp_path)
    aad = aad_for("t", "w", "o", "record")
    wrapped = keys.wrap("t", b"k" * 32, aad)
    assert keys.unwrap("t", wrapped, aad) == b"k" * 32
    with pytest.raises(CryptoError):
        keys.unwrap("t", wrapped, aad_for("t", "w", "other", "record"))


def test_dev_keyring_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    first = Keyring.ensure_dev_file(str(path))
    assert path.stat().st_mode & 0o077 == 0
    assert Keyring.ensure_dev_file(str(path)).kek_for("x") == first.kek_for("x")


def test_unknown_kek_and_bad_keyrings(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(json.dumps({"version": 1, "tenants": {"a": {"kek_id": "a1", "key": "AAAA"}}}))
    with pytest.raises(ValueError):
        Keyring.load(str(path))
    path.write_text(json.dumps({"version": 2}))
    with pytest.raises(ValueError):
        Keyring.load(str(path))
    empty = Keyring({}, None)
    with pytest.raises(KeyError):
        empty.kek_for("nobody")


def test_hmac_keys_differ_by_tenant_and_purpose(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    Keyring.ensure_dev_file(str(path))
    doc = json.loads(path.read_text())
    doc["tenants"]["b"] = {"kek_id": "b1", "key": doc["default"]["key"][::-1]}
    path.write_text(json.dumps(doc))
    keys = FileKeyProvider(Keyring.load(str(path)))
    assert keys.hmac_key("a", "p") != keys.hmac_key("b", "p") != keys.hmac_key("a", "q")
