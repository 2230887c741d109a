"""Scope change tokens: when a reader may reuse what it read of a scope (SPEC §5: an idle
search makes no storage round trip).

Every call the gateway serves needs the scope's policy (tool visibility, redaction, language)
and a search also the journal head. Reading them from storage on every call costs a storage
round trip and a database read, although they change only when the scope is written. Instead:

- **Storage** publishes a fresh random *change token* for a scope in Redis
  (``<prefix>scope:<scope digest>``) after every committed write group of that scope and
  before any of the group's callers gets its answer (:class:`ChangePublisher`). A group whose
  token cannot be published answers ``STORE_UNAVAILABLE`` (retriable; the write may have
  committed, and a retry with the same key replays it — and publishes again). So no caller is
  ever told a write happened while a reader could still miss it.
- Each storage process also writes a random *storage epoch* (``<prefix>scope:epoch``) when it
  starts (a restore or a migration runs with a storage restart: every reuse ends).
- **A reader** (the gateway) reads, in one round trip, the replay store's memory epoch (moved
  whenever the Redis server restarted: :mod:`engram_core.host_context`), the storage epoch and
  the scope's token: the *stamp*. It reuses its copy of the scope's policy and head while the
  stamp is the one it read *before* reading that copy (:class:`ScopeReadCache`). No stamp (a
  key missing: Redis lost its memory, or no storage has published since; Redis not answering)
  means no reuse: the reader asks storage.

Tokens are random (never reused, so a ``FLUSHALL`` or a restart cannot bring an old one
back); keys and values hold digests and random ids only, never tenant names or content.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from typing import Generic, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

log = logging.getLogger("engram.scope_changes")

SCOPE_PREFIX = "scope:"
EPOCH_NAME = "epoch"
DEFAULT_TIMEOUT_SECONDS = 2.0
DEFAULT_CACHE_SCOPES = 4096

V = TypeVar("V")


class ChangeUnpublished(Exception):
    """The scope's change token could not be written (Redis away or too slow)."""


def token_key(prefix: str, scope_key: str) -> str:
    """The Redis key of a scope's change token (``prefix``: the deployment's key prefix)."""
    return f"{prefix}{SCOPE_PREFIX}{scope_key}"


def epoch_key(prefix: str) -> str:
    return f"{prefix}{SCOPE_PREFIX}{EPOCH_NAME}"


def _fresh() -> str:
    return secrets.token_hex(16)


class ChangePublisher:
    """Storage's side: a new token per committed write group, and the storage epoch."""

    def __init__(self, redis: aioredis.Redis, prefix: str, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self._redis = redis
        self._prefix = prefix
        self._timeout = timeout_seconds
        self._epoch = _fresh()

    @classmethod
    def connect(cls, url: str, prefix: str, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> "ChangePublisher":
        return cls(aioredis.Redis.from_url(url), prefix, timeout_seconds=timeout_seconds)

    async def start(self) -> None:
        """Move the storage epoch (every reader's copies end). A Redis that does not answer now
        is logged; the first publish writes the epoch then (:meth:`publish` sets it where none
        is)."""
        try:
            async with asyncio.timeout(self._timeout):
                await self._redis.set(epoch_key(self._prefix), self._epoch)
        except (RedisError, OSError, TimeoutError):
            log.warning("scope change epoch not written at start")

    async def publish(self, scope_key: str) -> None:
        """A new token for the scope (and the epoch, where Redis holds none); raises
        :class:`ChangeUnpublished`."""
        try:
            async with asyncio.timeout(self._timeout):
                for attempt in range(2):
                    try:
                        async with self._redis.pipeline(transaction=True) as pipe:
                            pipe.set(epoch_key(self._prefix), self._epoch, nx=True)
                            pipe.set(token_key(self._prefix, scope_key), _fresh())
                            await pipe.execute()
                        return
                    except RedisConnectionError:
                        if attempt:  # a pooled connection a Redis restart closed: once more, fresh
                            raise
        except (RedisError, OSError, TimeoutError) as exc:
            raise ChangeUnpublished() from exc

    async def close(self) -> None:
        await self._redis.aclose()


class ScopeReadCache(Generic[V]):
    """A reader's copies of what it read of each scope, valid while the scope's stamp holds.

    ``redis`` must be the replay guard's client (its connections move the memory epoch named
    ``memory_epoch_key`` before their first command). At most ``max_scopes`` copies, least
    recently used dropped first; 0 turns reuse off (every :meth:`stamp` is None)."""

    def __init__(self, redis: aioredis.Redis, prefix: str, memory_epoch_key: str, *,
                 max_scopes: int = DEFAULT_CACHE_SCOPES, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self._redis = redis
        self._prefix = prefix
        self._memory_epoch_key = memory_epoch_key
        self._max = max_scopes
        self._timeout = timeout_seconds
        self._copies: OrderedDict[str, tuple[str, V]] = OrderedDict()
        # Reuses and reads (tests and benchmarks read them).
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._copies)

    async def stamp(self, scope_key: str) -> str | None:
        """The scope's stamp now, or None (no reuse possible). Read it before the copy it is
        to validate."""
        if self._max <= 0:
            return None
        try:
            async with asyncio.timeout(self._timeout):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.hget(self._memory_epoch_key, "since")
                    pipe.get(epoch_key(self._prefix))
                    pipe.get(token_key(self._prefix, scope_key))
                    memory, epoch, token = await pipe.execute()
        except (RedisError, OSError, TimeoutError):
            return None
        if memory is None or epoch is None:
            return None
        parts = [p.decode() if isinstance(p, bytes) else str(p) for p in (memory, epoch, token or b"-")]
        return "|".join(parts)

    def get(self, scope_key: str, stamp: str | None) -> V | None:
        """The copy read under ``stamp``, if any."""
        held = self._copies.get(scope_key) if stamp is not None else None
        if held is None or held[0] != stamp:
            self.misses += 1
            return None
        self._copies.move_to_end(scope_key)
        self.hits += 1
        return held[1]

    def put(self, scope_key: str, stamp: str | None, value: V) -> None:
        """Keep ``value``, read after ``stamp`` was (nothing kept without a stamp)."""
        if stamp is None or self._max <= 0:
            return
        self._copies[scope_key] = (stamp, value)
        self._copies.move_to_end(scope_key)
        while len(self._copies) > self._max:
            self._copies.popitem(last=False)
