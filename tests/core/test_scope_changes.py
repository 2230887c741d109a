"""Scope change tokens on a real Redis: storage's publisher, the gateway's stamp and copies
(engram_core/scope_changes.py). A copy is reused only under the stamp read before it; any
write, a storage start, a Redis restart (with or without its data) or a missing key ends it."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from engram_cli.datastores import ChildProcess, free_port, start_redis
from engram_core.host_context import ReplayGuard
from engram_core.scope_changes import (ChangePublisher, ChangeUnpublished, ScopeReadCache, epoch_key,
                                       token_key)

SCOPE = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:10]}:"


@pytest_asyncio.fixture
async def guard(redis_url: str, prefix: str) -> AsyncIterator[ReplayGuard]:
    """The replay guard a gateway runs: its connections set the memory epoch."""
    replay = ReplayGuard.connect(redis_url, prefix=prefix + "jti:")
    await replay.start()
    yield replay
    keys = [k async for k in replay.redis.scan_iter(match=prefix + "*")]
    if keys:
        await replay.redis.delete(*keys)
    await replay.redis.aclose()


@pytest_asyncio.fixture
async def publisher(redis_url: str, prefix: str) -> AsyncIterator[ChangePublisher]:
    changes = ChangePublisher.connect(redis_url, prefix)
    await changes.start()
    yield changes
    await changes.close()


def cache_of(guard: ReplayGuard, prefix: str, max_scopes: int = 8) -> ScopeReadCache[str]:
    return ScopeReadCache(guard.redis, prefix, guard.epoch_key, max_scopes=max_scopes)


async def test_a_copy_is_reused_until_the_scope_changes(guard: ReplayGuard, publisher: ChangePublisher,
                                                        prefix: str) -> None:
    cache = cache_of(guard, prefix)
    stamp = await cache.stamp(SCOPE)
    assert stamp is not None and stamp.endswith("|-")  # never written: a stamp all the same
    assert cache.get(SCOPE, stamp) is None
    cache.put(SCOPE, stamp, "policy@1")
    assert await cache.stamp(SCOPE) == stamp
    assert cache.get(SCOPE, await cache.stamp(SCOPE)) == "policy@1"
    await publisher.publish(SCOPE)
    moved = await cache.stamp(SCOPE)
    assert moved is not None and moved != stamp
    assert cache.get(SCOPE, moved) is None
    # Another scope's write does not touch this one.
    cache.put(SCOPE, moved, "policy@2")
    await publisher.publish(OTHER)
    assert cache.get(SCOPE, await cache.stamp(SCOPE)) == "policy@2"
    assert (cache.hits, cache.misses) == (2, 2)


async def test_every_publish_is_a_new_token(redis_url: str, publisher: ChangePublisher, prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        seen = set()
        for _ in range(5):
            await publisher.publish(SCOPE)
            seen.add(await client.get(token_key(prefix, SCOPE)))
        assert len(seen) == 5
        # Keys and values name digests and random ids only.
        assert all(len(v) == 32 and int(v, 16) >= 0 for v in seen)
    finally:
        await client.aclose()


async def test_a_storage_start_ends_every_copy(redis_url: str, guard: ReplayGuard, publisher: ChangePublisher,
                                               prefix: str) -> None:
    cache = cache_of(guard, prefix)
    stamp = await cache.stamp(SCOPE)
    cache.put(SCOPE, stamp, "before")
    restarted = ChangePublisher.connect(redis_url, prefix)
    try:
        await restarted.start()
        assert cache.get(SCOPE, await cache.stamp(SCOPE)) is None
        # A publish keeps the epoch the last start wrote (it only fills a missing one).
        current = await cache.stamp(SCOPE)
        await publisher.publish(OTHER)
        assert await cache.stamp(SCOPE) == current
    finally:
        await restarted.close()


async def test_no_stamp_without_both_epochs(redis_url: str, guard: ReplayGuard, prefix: str) -> None:
    cache = cache_of(guard, prefix)
    # No storage has started or published under this prefix: nothing may be reused.
    assert await cache.stamp(SCOPE) is None
    cache.put(SCOPE, None, "never kept")
    assert len(cache) == 0 and cache.get(SCOPE, None) is None
    changes = ChangePublisher.connect(redis_url, prefix)
    try:
        await changes.publish(SCOPE)  # a publish writes a missing epoch
        assert await cache.stamp(SCOPE) is not None
        await guard.redis.delete(epoch_key(prefix))  # e.g. a FLUSHALL
        assert await cache.stamp(SCOPE) is None
        await changes.publish(SCOPE)
        await guard.redis.delete(guard.epoch_key)  # the replay store's memory epoch gone
        assert await cache.stamp(SCOPE) is None
    finally:
        await changes.close()


async def test_reuse_off_and_bounded(guard: ReplayGuard, publisher: ChangePublisher, prefix: str) -> None:
    off = cache_of(guard, prefix, max_scopes=0)
    assert await off.stamp(SCOPE) is None
    bounded = cache_of(guard, prefix, max_scopes=2)
    scopes = [f"sha256:{n:064x}" for n in range(3)]
    for scope in scopes:
        bounded.put(scope, await bounded.stamp(scope), scope)
    assert len(bounded) == 2
    assert bounded.get(scopes[0], await bounded.stamp(scopes[0])) is None  # least recently used
    assert bounded.get(scopes[2], await bounded.stamp(scopes[2])) == scopes[2]


async def test_redis_unreachable_no_reuse_and_publish_fails(guard: ReplayGuard, prefix: str) -> None:
    dead_url = f"redis://127.0.0.1:{free_port()}/0"
    changes = ChangePublisher.connect(dead_url, prefix, timeout_seconds=0.5)
    try:
        await changes.start()  # logged, not raised: the first publish writes the epoch
        with pytest.raises(ChangeUnpublished):
            await changes.publish(SCOPE)
    finally:
        await changes.close()
    blind = ReplayGuard.connect(dead_url, prefix=prefix + "jti:")
    try:
        cache: ScopeReadCache[str] = ScopeReadCache(blind.redis, prefix, blind.epoch_key, timeout_seconds=0.5)
        assert await cache.stamp(SCOPE) is None
    finally:
        await blind.redis.aclose()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[ChildProcess, Path]]:
    child = start_redis(data_dir=tmp_path / "redis")
    yield child, tmp_path / "redis"
    child.stop()


@pytest.mark.parametrize("keep_data", [False, True], ids=["no-persistence", "aof-kept"])
async def test_a_redis_restart_ends_every_copy(own_redis: tuple[ChildProcess, Path], keep_data: bool) -> None:
    """Even one that kept its data: it may have lost the last second of tokens."""
    child, data = own_redis
    replay = ReplayGuard.connect(child.url, prefix="t:jti:")
    changes = ChangePublisher.connect(child.url, "t:")
    try:
        await replay.start()
        await changes.start()
        await changes.publish(SCOPE)
        cache: ScopeReadCache[str] = ScopeReadCache(replay.redis, "t:", replay.epoch_key)
        stamp = await cache.stamp(SCOPE)
        cache.put(SCOPE, stamp, "before the restart")
        child.stop()
        if not keep_data:
            shutil.rmtree(data)
            data.mkdir()
        child.start()
        # The first command after the restart may fail (no reuse) or reconnect at once; either
        # way the new connection moved the memory epoch before its first command.
        after = await cache.stamp(SCOPE) or await cache.stamp(SCOPE)
        if keep_data:
            assert after is not None and after != stamp
            assert cache.get(SCOPE, after) is None
        else:
            assert after is None  # the storage epoch is gone with the data: no reuse
            await changes.publish(SCOPE)
            assert await cache.stamp(SCOPE) is not None
    finally:
        await changes.close()
        await replay.redis.aclose()
