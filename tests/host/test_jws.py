"""engram_core.jws: compact EdDSA JWS, strict base64url, constant errors with a reason."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_core.jws import (
    MAX_TOKEN_BYTES,
    JWSError,
    b64url_decode,
    b64url_encode,
    private_key_from_b64url,
    private_key_to_b64url,
    public_key_from_b64url,
    public_key_to_b64url,
    sign_compact,
    verify_compact,
)

TYP = "test+jwt"
KEY = Ed25519PrivateKey.generate()
OTHER = Ed25519PrivateKey.generate()


def resolve(kid: str):
    return KEY.public_key() if kid == "k1" else None


def raw_token(header: dict | bytes, claims: dict | bytes, key: Ed25519PrivateKey = KEY) -> str:
    """Assemble and sign a token from raw JSON bytes (to forge duplicate keys etc.)."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    c = claims if isinstance(claims, bytes) else json.dumps(claims).encode()
    signing_input = b64url_encode(h) + "." + b64url_encode(c)
    return signing_input + "." + b64url_encode(key.sign(signing_input.encode()))


def good_header(**extra):
    return {"alg": "EdDSA", "typ": TYP, "kid": "k1", **extra}


def reason(token, typ: str = TYP) -> str:
    with pytest.raises(JWSError) as info:
        verify_compact(token, resolve, typ)
    return info.value.reason


def test_round_trip():
    token = sign_compact({"typ": TYP, "kid": "k1"}, {"sub": "x", "n": 1.5}, KEY)
    header, claims = verify_compact(token, resolve, TYP)
    assert header == {"alg": "EdDSA", "typ": TYP, "kid": "k1"}
    assert claims == {"sub": "x", "n": 1.5}


def test_error_message_is_constant():
    with pytest.raises(JWSError) as a:
        verify_compact("x", resolve, TYP)
    with pytest.raises(JWSError) as b:
        verify_compact(raw_token(good_header(), {"a": 1}, OTHER), resolve, TYP)
    assert str(a.value) == str(b.value)
    assert a.value.reason != b.value.reason


@pytest.mark.parametrize("token", ["", "a", "a.b", "a.b.c.d", "..", "a..b"])
def test_not_three_good_parts(token):
    reason(token)


def test_not_a_string():
    assert reason(b"a.b.c") == "not_a_string"  # type: ignore[arg-type]
    assert reason(None) == "not_a_string"  # type: ignore[arg-type]


def test_non_ascii_token():
    token = sign_compact({"typ": TYP, "kid": "k1"}, {}, KEY)
    assert reason(token + "é") == "not_ascii"


def _token_of_length(total: int) -> str:
    """A valid token exactly ``total`` characters long (header padding absorbs base64 steps)."""
    for header_pad in range(4):
        header = {"typ": TYP, "kid": "k1", "x": "y" * header_pad}
        base = len(sign_compact(header, {"p": ""}, KEY))
        n = max(0, (total - base) * 3 // 4 - 2)
        for extra in range(6):
            token = sign_compact(header, {"p": "x" * (n + extra)}, KEY)
            if len(token) == total:
                return token
    raise AssertionError("no token of that length")


def test_size_cap_both_sides():
    at_cap = _token_of_length(MAX_TOKEN_BYTES)
    verify_compact(at_cap, resolve, TYP)
    over = _token_of_length(MAX_TOKEN_BYTES + 1)
    assert reason(over) == "oversize"


def test_bad_base64_in_each_part():
    token = sign_compact({"typ": TYP, "kid": "k1"}, {"a": 1}, KEY)
    h, c, s = token.split(".")
    assert reason(f"{h}=.{c}.{s}") == "bad_header"
    assert reason(f"+{h[1:]}.{c}.{s}") == "bad_header"
    assert reason(f"{h}.{c}.{s}=") == "bad_signature_encoding"
    assert reason(f"{h}.{c}.{s[:-1]}*") == "bad_signature_encoding"


def test_header_not_json_or_not_object():
    assert reason(b64url_encode(b"not json") + ".e30." + "A" * 86) == "bad_header"
    assert reason(b64url_encode(b"[1,2]") + ".e30." + "A" * 86) == "bad_header"
    assert reason(b64url_encode(b"\xff\xfe") + ".e30." + "A" * 86) == "bad_header"


def test_duplicate_keys_refused_in_header_and_payload():
    dup_header = b'{"alg":"EdDSA","typ":"test+jwt","kid":"k1","kid":"k1"}'
    assert reason(raw_token(dup_header, {"a": 1})) == "bad_header"
    dup_claims = b'{"a":1,"a":2}'
    assert reason(raw_token(good_header(), dup_claims)) == "bad_payload"


def test_payload_not_object_or_nan():
    assert reason(raw_token(good_header(), b"[1]")) == "bad_payload"
    assert reason(raw_token(good_header(), b'{"a":NaN}')) == "bad_payload"
    assert reason(raw_token(good_header(), b"not json")) == "bad_payload"


def test_alg_none_refused():
    h = b64url_encode(json.dumps({"alg": "none", "typ": TYP, "kid": "k1"}).encode())
    c = b64url_encode(b'{"a":1}')
    assert reason(f"{h}.{c}.") == "bad_alg"


def test_hs256_with_public_key_as_secret_refused():
    h = b64url_encode(json.dumps({"alg": "HS256", "typ": TYP, "kid": "k1"}).encode())
    c = b64url_encode(b'{"a":1}')
    secret = b64url_decode(public_key_to_b64url(KEY.public_key()))
    mac = hmac.new(secret, f"{h}.{c}".encode(), hashlib.sha256).digest()
    assert reason(f"{h}.{c}.{b64url_encode(mac)}") == "bad_alg"


def test_alg_missing_or_other_refused_even_with_valid_signature():
    assert reason(raw_token({"typ": TYP, "kid": "k1"}, {"a": 1})) == "bad_alg"
    assert reason(raw_token({"alg": "Ed25519", "typ": TYP, "kid": "k1"}, {"a": 1})) == "bad_alg"
    assert reason(raw_token({"alg": "eddsa", "typ": TYP, "kid": "k1"}, {"a": 1})) == "bad_alg"


def test_typ_mismatch_or_missing():
    token = sign_compact({"typ": TYP, "kid": "k1"}, {"a": 1}, KEY)
    assert reason(token, "other+jwt") == "bad_typ"
    assert reason(raw_token({"alg": "EdDSA", "kid": "k1"}, {"a": 1})) == "bad_typ"


def test_crit_refused():
    assert reason(raw_token(good_header(crit=["exp"]), {"a": 1})) == "crit_present"
    assert reason(raw_token(good_header(crit=[]), {"a": 1})) == "crit_present"


def test_kid_missing_empty_non_string_unknown():
    assert reason(raw_token({"alg": "EdDSA", "typ": TYP}, {"a": 1})) == "missing_kid"
    assert reason(raw_token(good_header(kid=""), {"a": 1})) == "missing_kid"
    assert reason(raw_token(good_header(kid=7), {"a": 1})) == "missing_kid"
    assert reason(raw_token(good_header(kid="k2"), {"a": 1})) == "unknown_kid"


def test_bad_signature_wrong_key_tampered_truncated():
    assert reason(raw_token(good_header(), {"a": 1}, OTHER)) == "bad_signature"
    token = sign_compact({"typ": TYP, "kid": "k1"}, {"a": 1}, KEY)
    h, _, s = token.split(".")
    tampered = b64url_encode(b'{"a":2}')
    assert reason(f"{h}.{tampered}.{s}") == "bad_signature"
    assert reason(f"{h}.{token.split('.')[1]}.{s[:-4]}") in {"bad_signature", "bad_signature_encoding"}
    assert reason(f"{h}.{token.split('.')[1]}.") == "bad_signature"


def test_b64url_strict():
    assert b64url_decode("") == b""
    assert b64url_decode(b64url_encode(b"\x00\xff\xfe")) == b"\x00\xff\xfe"
    for bad in ["AA==", "AA=", "A", "AB", "A+A=", "A/AA", "AA AA", "AA\n", "ÄA"]:
        with pytest.raises(ValueError):
            b64url_decode(bad)
    with pytest.raises(ValueError):
        b64url_decode(b"AA")  # type: ignore[arg-type]


def test_raw_key_helpers_round_trip_and_bounds():
    private_b64 = private_key_to_b64url(KEY)
    public_b64 = public_key_to_b64url(KEY.public_key())
    assert len(b64url_decode(private_b64)) == 32 and len(b64url_decode(public_b64)) == 32
    restored = private_key_from_b64url(private_b64)
    assert public_key_to_b64url(restored.public_key()) == public_b64
    assert public_key_to_b64url(public_key_from_b64url(public_b64)) == public_b64
    for bad in [b64url_encode(b"\x00" * 31), b64url_encode(b"\x00" * 33), public_b64 + "=", "!!"]:
        with pytest.raises(ValueError):
            public_key_from_b64url(bad)
        with pytest.raises(ValueError):
            private_key_from_b64url(bad)
