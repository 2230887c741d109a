"""Compact JWS (RFC 7515) restricted to ``alg: EdDSA`` with Ed25519 keys.

This is the signing format of the host integration protocol (SPEC §2): invocation contexts
and confirmations are compact JWS tokens signed by a registered host.  The verifier is
deliberately narrow: one algorithm, strict base64url, JSON objects without duplicate keys,
no ``crit`` extensions, a size cap, and one constant error message.  Why a check failed is
kept in :attr:`JWSError.reason` (a fixed vocabulary, never token content) for server logs.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALG = "EdDSA"
MAX_TOKEN_BYTES = 8192
_SIGNATURE_BYTES = 64
_RAW_KEY_BYTES = 32
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
_JWS_MESSAGE = "invalid JWS"


class JWSError(Exception):
    """A token failed verification. The message is constant; ``reason`` says which check."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(_JWS_MESSAGE)


def b64url_encode(data: bytes) -> str:
    """Base64url without padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url decoding: no padding, no characters outside the alphabet, and only the
    canonical encoding of the bytes (unused trailing bits must be zero), so that one byte
    string has exactly one accepted textual form. Raises :class:`ValueError`."""
    if not isinstance(text, str) or not _B64URL_RE.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not strict base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not strict base64url") from exc
    if b64url_encode(data) != text:
        raise ValueError("not canonical base64url")
    return data


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError("duplicate JSON key")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError("non-finite JSON number")


def parse_json_object(data: bytes) -> dict[str, Any]:
    """Parse UTF-8 JSON that must be an object; duplicate keys and NaN/Infinity are refused.
    Raises :class:`ValueError`."""
    try:
        text = data.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError("bad JSON") from exc
    if not isinstance(value, dict):
        raise ValueError("JSON is not an object")
    return value


def _json_segment(value: dict[str, Any]) -> str:
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True)
    return b64url_encode(data.encode("utf-8"))


def sign_compact(header: dict[str, Any], claims: dict[str, Any], private_key: Ed25519PrivateKey) -> str:
    """Sign ``claims`` with Ed25519 and return the compact serialisation.

    ``alg`` defaults to ``EdDSA``; a caller-supplied ``alg`` is kept as given (tests use this to
    forge tokens the verifier must refuse), but the signature is always Ed25519.
    """
    protected = {"alg": ALG, **header}
    signing_input = _json_segment(protected) + "." + _json_segment(claims)
    signature = private_key.sign(signing_input.encode("ascii"))
    return signing_input + "." + b64url_encode(signature)


def verify_compact(
    token: str,
    resolve_key: Callable[[str], Ed25519PublicKey | None],
    expected_typ: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Verify a compact JWS and return ``(header, claims)``.

    Refused (:class:`JWSError`): a non-string or oversize token, not three segments, bad
    base64url, a header or payload that is not a JSON object (or has duplicate keys),
    ``alg`` other than ``EdDSA``, ``typ`` other than ``expected_typ``, a ``crit`` header,
    a missing kid or one ``resolve_key`` does not know, and a bad signature. The payload is
    parsed only after the signature checked out. Claim semantics are the caller's job.
    """
    if not isinstance(token, str):
        raise JWSError("not_a_string")
    if len(token) > MAX_TOKEN_BYTES:
        raise JWSError("oversize")
    if not token.isascii():
        raise JWSError("not_ascii")
    parts = token.split(".")
    if len(parts) != 3:
        raise JWSError("not_three_parts")
    header_b64, payload_b64, signature_b64 = parts
    try:
        header = parse_json_object(b64url_decode(header_b64))
    except ValueError as exc:
        raise JWSError("bad_header") from exc
    if header.get("alg") != ALG:
        raise JWSError("bad_alg")
    if header.get("typ") != expected_typ:
        raise JWSError("bad_typ")
    if "crit" in header:
        raise JWSError("crit_present")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise JWSError("missing_kid")
    public_key = resolve_key(kid)
    if public_key is None:
        raise JWSError("unknown_kid")
    try:
        signature = b64url_decode(signature_b64)
    except ValueError as exc:
        raise JWSError("bad_signature_encoding") from exc
    if len(signature) != _SIGNATURE_BYTES:
        raise JWSError("bad_signature")
    try:
        public_key.verify(signature, (header_b64 + "." + payload_b64).encode("ascii"))
    except InvalidSignature as exc:
        raise JWSError("bad_signature") from exc
    try:
        claims = parse_json_object(b64url_decode(payload_b64))
    except ValueError as exc:
        raise JWSError("bad_payload") from exc
    return header, claims


def public_key_from_b64url(text: str) -> Ed25519PublicKey:
    """An Ed25519 public key from its raw 32 bytes, base64url. Raises :class:`ValueError`."""
    raw = b64url_decode(text)
    if len(raw) != _RAW_KEY_BYTES:
        raise ValueError("an Ed25519 public key is 32 raw bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def private_key_from_b64url(text: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from its raw 32-byte seed, base64url. Raises :class:`ValueError`."""
    raw = b64url_decode(text)
    if len(raw) != _RAW_KEY_BYTES:
        raise ValueError("an Ed25519 private key is 32 raw bytes")
    return Ed25519PrivateKey.from_private_bytes(raw)


def public_key_to_b64url(key: Ed25519PublicKey) -> str:
    """The raw 32 public-key bytes, base64url."""
    return b64url_encode(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def private_key_to_b64url(key: Ed25519PrivateKey) -> str:
    """The raw 32-byte private seed, base64url."""
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return b64url_encode(raw)
