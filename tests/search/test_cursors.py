import base64
import hashlib
import hmac
import json

import pytest

from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError
from search_service.cursors import (
    CLOCK_SKEW_MS,
    DEFAULT_TTL_MS,
    MAX_TOKEN_LENGTH,
    CursorCodec,
    CursorState,
)

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
ISSUED = 1_800_000_000_000


def digest_of(char: str) -> str:
    return "sha256:" + char * 64


def state(**changes) -> CursorState:
    fields = dict(
        request_digest=digest_of("a"),
        scope_digest=digest_of("b"),
        principal_digest=digest_of("c"),
        system_as_of="1234",
        valid_as_of=ISSUED - 5,
        offset=10,
        ordered_ids_digest=digest_of("d"),
        issued_at_ms=ISSUED,
    )
    fields.update(changes)
    return CursorState(**fields)


def assert_stale(codec: CursorCodec, token, now_ms: int = ISSUED) -> None:
    with pytest.raises(EngramError) as info:
        codec.decode(token, now_ms=now_ms)
    assert info.value.code is Code.STALE_PAGE


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(body: bytes, key: bytes = KEY) -> str:
    return b64(body) + "." + b64(hmac.new(key, body, hashlib.sha256).digest())


def test_round_trip():
    codec = CursorCodec(KEY)
    for s in (state(), state(system_as_of="0", valid_as_of=-(2**53 - 1), offset=0),
              state(system_as_of="9" * 20, offset=2**53 - 1, issued_at_ms=2**53 - 1)):
        token = codec.encode(s)
        assert codec.decode(token, now_ms=s.issued_at_ms) == s
        assert len(token) <= MAX_TOKEN_LENGTH
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def test_widest_state_has_max_length():
    codec = CursorCodec(KEY)
    widest = state(request_digest=digest_of("f"), system_as_of="9" * 20, valid_as_of=-(2**53 - 1),
                   offset=2**53 - 1, issued_at_ms=2**53 - 1)
    assert len(codec.encode(widest)) == MAX_TOKEN_LENGTH


def test_every_single_character_change_is_stale():
    codec = CursorCodec(KEY)
    token = codec.encode(state())
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i, char in enumerate(token):
        for replacement in {alphabet[(alphabet.find(char) + 1) % 64], "A", "."} - {char}:
            assert_stale(codec, token[:i] + replacement + token[i + 1:])
    assert_stale(codec, token[:-1])
    assert_stale(codec, token + "A")
    assert_stale(codec, token + "=")
    assert_stale(codec, "A" + token)


def test_other_key_is_stale_and_rotation_keeps_old_cursors():
    token = CursorCodec(OTHER_KEY).encode(state())
    assert_stale(CursorCodec(KEY), token)
    rotated = CursorCodec(KEY, previous_keys=[OTHER_KEY])
    assert rotated.decode(token, now_ms=ISSUED) == state()
    assert_stale(CursorCodec(OTHER_KEY), rotated.encode(state()))  # new ones use the new key


def test_expiry_boundaries():
    codec = CursorCodec(KEY)
    token = codec.encode(state())
    assert codec.decode(token, now_ms=ISSUED + DEFAULT_TTL_MS - 1) == state()
    assert_stale(codec, token, now_ms=ISSUED + DEFAULT_TTL_MS)
    assert codec.decode(token, now_ms=ISSUED - CLOCK_SKEW_MS) == state()
    assert_stale(codec, token, now_ms=ISSUED - CLOCK_SKEW_MS - 1)
    short = CursorCodec(KEY, ttl_ms=1000)
    assert short.decode(token, now_ms=ISSUED + 999) == state()
    assert_stale(short, token, now_ms=ISSUED + 1000)
    assert DEFAULT_TTL_MS == 15 * 60 * 1000


@pytest.mark.parametrize(
    "token",
    ["", ".", "..", "a.b", "a.b.c", "=.=", "not a token", "é.é", 42, None, b"bytes.bytes",
     "A" * (MAX_TOKEN_LENGTH + 1)],
)
def test_garbage_is_stale(token):
    assert_stale(CursorCodec(KEY), token)


def body(**changes) -> dict:
    fields = {"v": 1, "req": digest_of("a"), "scope": digest_of("b"), "prin": digest_of("c"),
              "sys": "1234", "valid": ISSUED - 5, "off": 10, "ids": digest_of("d"), "iat": ISSUED}
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not ...}


def test_correctly_signed_but_invalid_bodies_are_stale():
    codec = CursorCodec(KEY)
    assert codec.decode(signed(canonicalize(body())), now_ms=ISSUED) == state()
    bad_bodies = [
        canonicalize(body(v=2)),
        canonicalize(body(off=-1)),
        canonicalize(body(off=True)),
        canonicalize(body(sys="01")),
        canonicalize(body(sys=1234)),
        canonicalize(body(sys="1" * 21)),
        canonicalize(body()).replace(b'"valid":%d' % (ISSUED - 5), b'"valid":9007199254740992'),
        canonicalize(body(req="sha256:" + "A" * 64)),
        canonicalize(body(prin="alice")),
        canonicalize(body(extra="x")),
        canonicalize(body(ids=...)),
        canonicalize([1, 2]),
        json.dumps(body(), sort_keys=True).encode(),  # not canonical (spaces)
        canonicalize(body()).replace(b'"off":10', b'"off":10.0'),
        canonicalize(body()).replace(b'"off":10', b'"off":1e1'),
        canonicalize(body()).replace(b'"v":1,', b'"v":1,"v":1,'),
        b"\xff\xfe",
        b"",
    ]
    for bad in bad_bodies:
        assert_stale(codec, signed(bad))


def test_encode_refuses_out_of_range_states():
    codec = CursorCodec(KEY)
    for bad in (state(offset=-1), state(system_as_of="01"), state(request_digest="x"),
                state(valid_as_of=2**53), state(issued_at_ms=-1), state(offset=1.0)):
        with pytest.raises(ValueError):
            codec.encode(bad)


def test_key_and_ttl_requirements():
    with pytest.raises(ValueError):
        CursorCodec(b"short")
    with pytest.raises(ValueError):
        CursorCodec(KEY, previous_keys=[b"short"])
    with pytest.raises(ValueError):
        CursorCodec(KEY, ttl_ms=0)


def test_no_raw_identities_in_the_token():
    codec = CursorCodec(KEY)
    scope = codec.scope_digest("tenant-acme", "workspace-red")
    principal = codec.principal_digest("tenant-acme", "workspace-red", "alice@example.com")
    token = codec.encode(state(scope_digest=scope, principal_digest=principal))
    readable = base64.urlsafe_b64decode(token.split(".")[0] + "==")
    for raw in (b"tenant-acme", b"workspace-red", b"alice"):
        assert raw not in readable
    # keyed: another key gives other digests, so they cannot be confirmed by guessing
    other = CursorCodec(OTHER_KEY)
    assert other.scope_digest("tenant-acme", "workspace-red") != scope
    assert codec.scope_digest("tenant-acme", "workspace-red") == scope
    assert codec.scope_digest("tenant-acme", "workspace-blue") != scope
    assert codec.principal_digest("tenant-acme", "workspace-red", "bob") != principal
    # the pair is encoded unambiguously
    assert codec.scope_digest("a", "bc") != codec.scope_digest("ab", "c")
