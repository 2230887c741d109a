"""Signed page cursors (SPEC §9 "Page cursor").

Token = ``base64url(body) + "." + base64url(HMAC-SHA256(key, body))``, both unpadded, where
``body`` is the RFC 8785 canonical JSON of the cursor state with short keys. The body is
authenticated, not encrypted: it carries digests only, never a raw tenant, workspace or
principal (use :meth:`CursorCodec.scope_digest` / :meth:`CursorCodec.principal_digest`, which
are keyed, so they cannot be confirmed by guessing). Every decoding problem (format, encoding,
signature, version, field types, expiry, a token from the future) is ``STALE_PAGE``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError

DEFAULT_TTL_MS = 15 * 60 * 1000
CLOCK_SKEW_MS = 5_000
MAX_EPOCH_MS = 2**53 - 1
MAX_CURSOR_DIGITS = 20
VERSION = 1

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CURSOR = re.compile(r"0|[1-9][0-9]{0,19}")
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_KEYS = {"v", "req", "scope", "prin", "sys", "valid", "off", "ids", "iat"}


@dataclass(frozen=True, slots=True)
class CursorState:
    """What a page cursor pins: the request, the caller, the snapshot and the position."""

    request_digest: str
    scope_digest: str
    principal_digest: str
    system_as_of: str
    valid_as_of: int
    offset: int
    ordered_ids_digest: str
    issued_at_ms: int


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _valid(state: CursorState) -> bool:
    digests = (state.request_digest, state.scope_digest, state.principal_digest,
               state.ordered_ids_digest)
    return (
        all(isinstance(d, str) and _DIGEST.fullmatch(d) for d in digests)
        and isinstance(state.system_as_of, str)
        and _CURSOR.fullmatch(state.system_as_of) is not None
        and _is_int(state.valid_as_of)
        and -MAX_EPOCH_MS <= state.valid_as_of <= MAX_EPOCH_MS
        and _is_int(state.offset)
        and 0 <= state.offset <= MAX_EPOCH_MS
        and _is_int(state.issued_at_ms)
        and 0 <= state.issued_at_ms <= MAX_EPOCH_MS
    )


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    """Strict unpadded base64url: the text must be the one canonical encoding of its bytes."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64encode(data) != text:
        raise ValueError("non-canonical base64url")
    return data


def _body(state: CursorState) -> bytes:
    return canonicalize({
        "v": VERSION,
        "req": state.request_digest,
        "scope": state.scope_digest,
        "prin": state.principal_digest,
        "sys": state.system_as_of,
        "valid": state.valid_as_of,
        "off": state.offset,
        "ids": state.ordered_ids_digest,
        "iat": state.issued_at_ms,
    })


class CursorCodec:
    """Issues and verifies page cursors with an HMAC key (≥ 32 bytes) shared by replicas.

    ``previous_keys`` are still accepted for verification (key rotation); new cursors are
    always signed with ``key``. A cursor is valid while
    ``issued_at - 5 s <= now < issued_at + ttl``.
    """

    def __init__(self, key: bytes, ttl_ms: int = DEFAULT_TTL_MS,
                 previous_keys: Sequence[bytes] = ()) -> None:
        if len(key) < 32 or any(len(k) < 32 for k in previous_keys):
            raise ValueError("cursor keys must be at least 32 bytes")
        if ttl_ms <= 0:
            raise ValueError("ttl must be positive")
        self._key = bytes(key)
        self._verify_keys = (self._key, *(bytes(k) for k in previous_keys))
        self.ttl_ms = ttl_ms

    def _keyed_digest(self, domain: str, value: object) -> str:
        mac = hmac.new(self._key, domain.encode("ascii") + b"\x00" + canonicalize(value),
                       hashlib.sha256)
        return "sha256:" + mac.hexdigest()

    def scope_digest(self, tenant: str, workspace: str) -> str:
        """A keyed digest of the scope, fit to travel inside a readable cursor."""
        return self._keyed_digest("engram/cursor-scope/v1",
                                  {"tenant": tenant, "workspace": workspace})

    def principal_digest(self, tenant: str, workspace: str, principal: str) -> str:
        """A keyed digest of the principal within its scope."""
        return self._keyed_digest("engram/cursor-principal/v1",
                                  {"tenant": tenant, "workspace": workspace,
                                   "principal": principal})

    def encode(self, state: CursorState) -> str:
        if not _valid(state):
            raise ValueError("cursor state out of range")
        body = _body(state)
        signature = hmac.new(self._key, body, hashlib.sha256).digest()
        return _b64encode(body) + "." + _b64encode(signature)

    def decode(self, token: str, *, now_ms: int) -> CursorState:
        """Verify and open a cursor; any problem at all is ``EngramError(STALE_PAGE)``."""
        try:
            state = self._open(token)
        except (ValueError, TypeError, KeyError, binascii.Error, RecursionError):
            raise EngramError(Code.STALE_PAGE) from None
        if state is None or not _valid(state):
            raise EngramError(Code.STALE_PAGE)
        if not state.issued_at_ms - CLOCK_SKEW_MS <= now_ms < state.issued_at_ms + self.ttl_ms:
            raise EngramError(Code.STALE_PAGE)
        return state

    def _open(self, token: str) -> CursorState | None:
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
            return None
        parts = token.split(".")
        if len(parts) != 2:
            return None
        body, signature = _b64decode(parts[0]), _b64decode(parts[1])
        if not any(
            hmac.compare_digest(hmac.new(key, body, hashlib.sha256).digest(), signature)
            for key in self._verify_keys
        ):
            return None
        fields = json.loads(body.decode("utf-8"))
        if not isinstance(fields, dict) or set(fields) != _KEYS or fields["v"] != VERSION:
            return None
        state = CursorState(
            request_digest=fields["req"],
            scope_digest=fields["scope"],
            principal_digest=fields["prin"],
            system_as_of=fields["sys"],
            valid_as_of=fields["valid"],
            offset=fields["off"],
            ordered_ids_digest=fields["ids"],
            issued_at_ms=fields["iat"],
        )
        if not _valid(state) or _body(state) != body:
            return None
        return state


def _max_token_length() -> int:
    widest = CursorState(
        request_digest="sha256:" + "f" * 64,
        scope_digest="sha256:" + "f" * 64,
        principal_digest="sha256:" + "f" * 64,
        system_as_of="9" * MAX_CURSOR_DIGITS,
        valid_as_of=-MAX_EPOCH_MS,
        offset=MAX_EPOCH_MS,
        ordered_ids_digest="sha256:" + "f" * 64,
        issued_at_ms=MAX_EPOCH_MS,
    )
    body = _body(widest)
    return len(_b64encode(body)) + 1 + len(_b64encode(b"\x00" * 32))


MAX_TOKEN_LENGTH = _max_token_length()
"""No token this codec issues is longer: the size of the budget's cursor placeholder."""
