"""Verify the host's invocation context (SPEC §1.6, §2) and guard jtis against replay.

Every ``tools/list`` and ``tools/call`` carries a compact JWS signed by a registered host in
``params._meta["io.engram/context"]`` and/or the ``Engram-Context`` HTTP header. Anything
wrong with it is the one protocol refusal ``-32603 Trusted invocation context unavailable``;
the reason is logged server-side (a fixed word, never token content). The gateway verifies it
first (with the replay guard); storage verifies the same token again, forwarded in the
``Caller``, before it acts (``storage_service/authority.py``: no replay guard there, a grace
for the call in flight).

Check order: the token's signature and every claim are checked before the replay guard is
consulted, so a forged or invalid token can never burn a legitimate jti.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from engram_core.dependency import Dependency
from engram_core.errors import ProtocolRefusal
from engram_core.jws import JWSError, verify_compact
from engram_core.schemas.tools import TOOL_NAMES as ALL_TOOL_NAMES
from engram_core.timefmt import parse_instant
from engram_core.hosts import HostRegistry

log = logging.getLogger("engram.context")

CONTEXT_TYP = "engram-context+jwt"
CLOCK_SKEW_SECONDS = 5.0
MAX_LIFETIME_SECONDS = 300.0
MAX_TEXT_BYTES = 512
JTI_MIN, JTI_MAX = 16, 128
TOOL_NAMES = frozenset(ALL_TOOL_NAMES)
TEXT_CLAIMS = ("tenant", "workspace", "principal", "agent_id", "session", "purpose_ref", "audit_id")
CONTEXT_CLAIMS = frozenset({"iss", "aud", "iat", "exp", "jti", "deadline", "tools", *TEXT_CLAIMS})
_JTI_RE = re.compile(r"[\x21-\x7e]{%d,%d}" % (JTI_MIN, JTI_MAX))


class ClaimError(ValueError):
    """A claim check failed; ``reason`` is a fixed word for server logs."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def parse_instant_ms(text: Any) -> int:
    """Epoch milliseconds of a strict ``YYYY-MM-DDTHH:mm:ss.sssZ`` instant (SPEC §3).

    Raises :class:`ValueError` for any other form or a calendar-invalid date. ASCII is checked
    here because a ``\\d`` pattern alone also admits non-ASCII decimal digits.
    """
    if not isinstance(text, str) or not text.isascii():
        raise ValueError("not an instant")
    return parse_instant(text)


def check_text(value: Any, reason: str) -> str:
    """A non-empty NFC string of at most 512 UTF-8 bytes (the opaque-ref rule of SPEC §3)."""
    if not isinstance(value, str) or not value:
        raise ClaimError(reason)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ClaimError(reason) from None
    if size > MAX_TEXT_BYTES or not unicodedata.is_normalized("NFC", value):
        raise ClaimError(reason)
    return value


def check_number(value: Any, reason: str) -> float:
    """A finite JSON number (NumericDate); booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ClaimError(reason)
    return float(value)


def check_jti(value: Any) -> str:
    """16..128 visible ASCII characters (0x21..0x7E)."""
    if not isinstance(value, str) or _JTI_RE.fullmatch(value) is None:
        raise ClaimError("bad_jti")
    return value


def replay_ttl(exp: float, now: float) -> int:
    """Seconds a jti must be remembered: the token's remaining lifetime plus the skew."""
    return max(1, math.ceil(exp - now + CLOCK_SKEW_SECONDS))


class ReplayGuardUnavailable(Exception):
    """The replay store could not be asked, or cannot vouch for the token (it lost its memory
    after the token was issued); the token cannot be verified. ``reason`` is a fixed word."""

    def __init__(self, reason: str = "unreachable") -> None:
        self.reason = reason
        super().__init__(reason)


def jti_key(namespace: str, host_id: str, jti: str) -> str:
    """``namespace:hex(SHA-256(host_id NUL jti))``: what a replay store keeps of a used jti."""
    return namespace + ":" + hashlib.sha256(host_id.encode("utf-8") + b"\0" + jti.encode("utf-8")).hexdigest()


class JtiGuard(Protocol):
    """Single-use jtis: :meth:`claim` records one, False if it was used already; raises
    :class:`ReplayGuardUnavailable` when the store cannot answer. ``issued_at`` (the token's
    ``iat``), where given, must not predate the store's memory (see :class:`ReplayGuard`)."""

    async def claim(self, namespace: str, jti: str, ttl_seconds: int, *, host_id: str,
                    issued_at: float | None = None) -> bool: ...


# KEYS[1] the epoch hash. ARGV[1] the server's run_id, ARGV[2] now (the gateway's clock). A
# run_id the hash does not hold means the server restarted (or the hash is gone): the store's
# memory starts now.
_BUMP_EPOCH = """
if redis.call('HGET', KEYS[1], 'run_id') ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'since', ARGV[2])
end
return 1
"""

# KEYS[1] the jti key, KEYS[2] the epoch hash. ARGV[1] ttl seconds, ARGV[2] the token's iat or ''.
# Returns 1 claimed, 0 used before, -1 the token predates the store's memory.
_CLAIM = """
if ARGV[2] ~= '' then
  local since = redis.call('HGET', KEYS[2], 'since')
  if since and tonumber(ARGV[2]) < tonumber(since) then return -1 end
end
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 1 end
return 0
"""


def _run_id(info: Any) -> str:
    text = info.decode() if isinstance(info, bytes) else str(info)
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("run_id:")), "")


def epoch_hook(epoch_key: str, clock: Callable[[], float]) -> Callable[[Any], Awaitable[None]]:
    """A redis-py ``redis_connect_func``: set up the connection, then move the epoch to now if
    the server's ``run_id`` is not the one the epoch names (runs before the connection's first
    command, so no claim is ever made on a restarted server before the epoch moved)."""

    async def on_connect(connection: Any) -> None:
        await connection.on_connect()
        await connection.send_command("INFO", "server")
        run_id = _run_id(await connection.read_response())
        await connection.send_command("EVAL", _BUMP_EPOCH, 1, epoch_key, run_id, repr(float(clock())))
        await connection.read_response()

    return on_connect


class ReplayGuard:
    """Single-use jtis in Redis: ``SET NX EX`` on ``prefix + namespace + ":" + hex(SHA-256(
    host_id + NUL + jti))``. Only the digest is stored, never the jti or the token.

    Namespaces: ``ctx`` (contexts) and ``cnf`` (confirmations), so the two token kinds never
    collide. If Redis cannot answer within ``timeout_seconds`` (or at all) :meth:`claim`
    raises :class:`ReplayGuardUnavailable`; callers fail closed.

    A context is never accepted twice, also across a Redis restart that lost data (no
    persistence, or the last second of an ``everysec`` append-only file). A guard made with
    :meth:`connect` keeps an *epoch* — ``prefix + "epoch"``, the instant since which the
    store's memory is whole: every new connection compares the server's ``run_id`` (``INFO
    server``) with the one the epoch names, and a different one (a restart) or none (a new
    store) moves the epoch to now. A claim with ``issued_at`` earlier than the epoch is refused
    as :class:`ReplayGuardUnavailable` (``store_reset``): the store cannot tell whether that jti
    was used, so the call fails retriably and the host's retry carries a fresh context. A
    restart with full persistence also moves the epoch (the run_id changes): the cost is one
    retriable refusal for the calls in flight at the restart. Not covered: a ``FLUSHALL`` on a
    running server (an operator's act; restart the gateways after one).
    """

    def __init__(self, redis: aioredis.Redis, prefix: str = "engram:jti:", *, timeout_seconds: float = 2.0) -> None:
        self.redis = redis
        self._prefix = prefix
        self._timeout = timeout_seconds
        self._claim = redis.register_script(_CLAIM)
        self.store = Dependency("replay_store", log)

    @classmethod
    def connect(cls, url: str, prefix: str = "engram:jti:", *, timeout_seconds: float = 2.0,
                clock: Callable[[], float] = time.time) -> "ReplayGuard":
        """A guard on its own client for ``url``, with the restart epoch on every connection."""
        client = aioredis.Redis.from_url(url, redis_connect_func=epoch_hook(prefix + "epoch", clock))
        return cls(client, prefix, timeout_seconds=timeout_seconds)

    def key(self, namespace: str, host_id: str, jti: str) -> str:
        return self._prefix + jti_key(namespace, host_id, jti)

    @property
    def epoch_key(self) -> str:
        """The hash naming the instant since which the store's memory is whole."""
        return self._prefix + "epoch"

    async def start(self) -> None:
        """Connect once (which sets the epoch on a store that has none), so contexts issued
        after the gateway started are not taken for older than the store; a store that is
        down now is logged and tried again on the first claim."""
        try:
            async with asyncio.timeout(self._timeout):
                await self.redis.ping()
        except (RedisError, OSError, TimeoutError):
            log.warning("replay store unavailable at start")

    async def ping(self, timeout_seconds: float | None = None) -> bool:
        """True when the store answers within ``timeout_seconds`` (default: the claim's)."""
        try:
            async with asyncio.timeout(self._timeout if timeout_seconds is None else timeout_seconds):
                answered = bool(await self.redis.ping())
        except (RedisError, OSError, TimeoutError):
            self.store.failed()
            return False
        self.store.ok()
        return answered

    async def claim(self, namespace: str, jti: str, ttl_seconds: int, *, host_id: str,
                    issued_at: float | None = None) -> bool:
        """Record ``jti`` as used for ``ttl_seconds``; False if it was already used."""
        iat = "" if issued_at is None else repr(float(issued_at))
        try:
            async with asyncio.timeout(self._timeout):
                result = await self._claim(keys=[self.key(namespace, host_id, jti), self.epoch_key],
                                           args=[max(1, ttl_seconds), iat])
        except (RedisError, OSError, TimeoutError) as exc:
            self.store.failed()
            raise ReplayGuardUnavailable() from exc
        self.store.ok()
        if int(result) < 0:
            raise ReplayGuardUnavailable("store_reset")
        return int(result) == 1


@dataclass(frozen=True)
class InvocationContext:
    """The verified binding of one call: scope, identity, purpose, audit id, deadline, tools."""

    host_id: str
    tenant: str
    workspace: str
    principal: str
    agent_id: str
    session: str
    purpose_ref: str
    audit_id: str
    deadline_ms: int
    tools: frozenset[str]
    jti: str
    iat: float
    exp: float
    # The compact JWS itself, forwarded to storage in the Caller (never logged: not in repr).
    token: str = field(default="", repr=False)


class ContextUnverifiable(Exception):
    """Signature and claims verified, the jti could not be checked (replay store down or
    reset). ``context`` is kept only for the audit id of the retriable answer."""

    def __init__(self, context: InvocationContext) -> None:
        self.context = context
        super().__init__("replay store unavailable")


def _check_tools(value: Any) -> frozenset[str]:
    if not isinstance(value, list) or any(not isinstance(t, str) or t not in TOOL_NAMES for t in value):
        raise ClaimError("bad_tools")
    tools = frozenset(value)
    if len(tools) != len(value):
        raise ClaimError("bad_tools")
    return tools


class ContextVerifier:
    """Turns a context token into an :class:`InvocationContext` or refuses with -32603.

    Every refusal — missing token, source conflict, malformed/unsigned/forged token, unknown
    host key, ``iss`` ≠ ``kid``, wrong audience, wrong ``typ``, a missing, unknown or
    ill-typed claim, a lifetime over 300 s, ``now`` outside ``[iat - 5 s, exp)``, a tenant the
    host may not act for, a replayed jti — is :meth:`ProtocolRefusal.untrusted`.

    Decisions where SPEC §2 is silent: the claim set is closed (an unknown claim is refused);
    ``aud`` must be a string; ``exp`` must be after ``iat``; the text claims follow the
    opaque-ref rule (non-empty NFC, ≤ 512 UTF-8 bytes); a ``deadline`` already in the past
    verifies (the call then fails ``DEADLINE_EXCEEDED`` in the gateway, which reads
    ``deadline_ms``); an empty ``tools`` list verifies (memory is off for that call).

    If the replay store cannot be asked (or lost its memory after the token was issued), the
    jti cannot be checked: that is an infrastructure fault, not an untrusted token, so it is
    :class:`ContextUnverifiable` (the gateway answers ``tools/call`` with the retriable
    ``STORE_UNAVAILABLE`` and ``tools/list`` with no tools; nothing is served unverified).

    ``replay=None`` (storage's second check) skips the jti guard; ``expiry_grace_seconds``
    accepts a token that expired that long ago (the call was verified before, in flight since).
    """

    def __init__(
        self,
        registry: HostRegistry,
        audience: str,
        replay: JtiGuard | None,
        clock: Callable[[], float] = time.time,
        expiry_grace_seconds: float = 0.0,
    ) -> None:
        self._registry = registry
        self._audience = audience
        self._replay = replay
        self._clock = clock
        self._grace = expiry_grace_seconds

    async def verify(self, meta_token: str | None, header_token: str | None) -> InvocationContext:
        """Verify the context from ``_meta`` and/or the HTTP header (``None`` when absent)."""
        self._registry.maybe_reload()
        if meta_token is not None and header_token is not None and meta_token != header_token:
            self._refuse("source_conflict")
        token = meta_token if meta_token is not None else header_token
        if token is None:
            self._refuse("missing")
        try:
            header, claims = verify_compact(token, self._registry.public_key, CONTEXT_TYP)
        except JWSError as exc:
            self._refuse(exc.reason)
        try:
            ctx = self._check_claims(header, claims, token)
        except ClaimError as exc:
            self._refuse(exc.reason)
        if self._replay is None:
            return ctx
        try:
            fresh = await self._replay.claim("ctx", ctx.jti, replay_ttl(ctx.exp, self._clock()), host_id=ctx.host_id,
                                             issued_at=ctx.iat)
        except ReplayGuardUnavailable as exc:
            if exc.reason != "unreachable":  # an outage is logged once by the guard's Dependency
                log.info("context not verified: replay store %s", exc.reason)
            raise ContextUnverifiable(ctx) from None
        if not fresh:
            self._refuse("replayed")
        return ctx

    def _check_claims(self, header: dict[str, Any], claims: dict[str, Any], token: str) -> InvocationContext:
        if set(claims) != CONTEXT_CLAIMS:
            raise ClaimError("claim_set")
        host_id = header["kid"]
        if claims["iss"] != host_id:
            raise ClaimError("iss_mismatch")
        if not isinstance(claims["aud"], str) or claims["aud"] != self._audience:
            raise ClaimError("aud_mismatch")
        texts = {name: check_text(claims[name], f"bad_{name}") for name in TEXT_CLAIMS}
        iat = check_number(claims["iat"], "bad_iat")
        exp = check_number(claims["exp"], "bad_exp")
        jti = check_jti(claims["jti"])
        try:
            deadline_ms = parse_instant_ms(claims["deadline"])
        except ValueError:
            raise ClaimError("bad_deadline") from None
        tools = _check_tools(claims["tools"])
        if not exp > iat or exp - iat > MAX_LIFETIME_SECONDS:
            raise ClaimError("lifetime")
        now = self._clock()
        if now < iat - CLOCK_SKEW_SECONDS:
            raise ClaimError("not_yet_valid")
        if now >= exp + self._grace:
            raise ClaimError("expired")
        entry = self._registry.get(host_id)
        if entry is None:
            raise ClaimError("unknown_kid")
        if texts["tenant"] not in entry.allowed_tenants:
            raise ClaimError("tenant_not_allowed")
        return InvocationContext(
            host_id=host_id,
            deadline_ms=deadline_ms,
            tools=tools,
            jti=jti,
            iat=iat,
            exp=exp,
            token=token,
            **texts,
        )

    @staticmethod
    def _refuse(reason: str) -> NoReturn:
        log.info("context refused: %s", reason)
        raise ProtocolRefusal.untrusted()
