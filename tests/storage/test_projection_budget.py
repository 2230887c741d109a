"""The search projection against a real storage service: a scope still building is waited for
up to the caller's deadline and then PROJECTION_STALE (never a partial answer), long catch-ups
log progress, and a per-process memory budget evicts whole scopes, least recently used first."""

from __future__ import annotations

import asyncio
import logging
import time


from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2, search_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.grpc_server import create_server
from engram_core.transport import Transport
from engram_core.schemas.validate import with_defaults
from engram_hostkit.examples import make_search_args
from search_service import projection as projection_module
from search_service.cursors import CursorCodec
from search_service.projection import Projections
from search_service.service import SearchServicer
from search_service.settings import SearchSettings
from tests.storage.helpers import Storage, Who, accepted_record, enable, rpc_code


class Intercepted:
    """The real storage stub, with :meth:`before` awaited ahead of every call of ``method``."""

    def __init__(self, stub: object, method: str) -> None:
        self._stub = stub
        self._method = method

    async def before(self) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        method = getattr(self._stub, name)
        if name != self._method:
            return method

        async def intercepted(*args: object, **kwargs: object) -> object:
            await self.before()
            return await method(*args, **kwargs)

        return intercepted


class SlowStorage(Intercepted):
    """The storage stub with every FetchRecords held back by ``delay`` seconds."""

    def __init__(self, stub: object, delay: float) -> None:
        super().__init__(stub, "FetchRecords")
        self.delay = delay

    async def before(self) -> None:
        await asyncio.sleep(self.delay)


class JournalClock(Intercepted):
    """The storage stub, noting when each ReadJournal starts."""

    def __init__(self, stub: object) -> None:
        super().__init__(stub, "ReadJournal")
        self.reads: list[float] = []

    async def before(self) -> None:
        self.reads.append(time.monotonic())


async def scope_with(storage: Storage, texts: list[str]) -> tuple[Who, list[str]]:
    who = Who()
    await enable(storage, who)
    return who, [(await accepted_record(storage, who, text))[1] for text in texts]


async def test_a_building_scope_answers_stale_at_the_deadline_then_serves(storage: Storage, monkeypatch, caplog) -> None:
    who, ids = await scope_with(storage, ["The tide gauge reads 3 m.", "The tide turns at noon.", "Buoys are yellow."])
    monkeypatch.setattr(projection_module, "JOURNAL_BATCH", 1)  # one event per batch: a long build
    slow = SlowStorage(storage.stub, 0.2)
    projections = Projections(slow, 30.0, progress_seconds=0.001)  # type: ignore[arg-type]
    view = await projections.policy(who.tenant, who.workspace)
    assert await rpc_code(projections.current(who.tenant, who.workspace, "en", view.head, wait_seconds=0.1)) \
        == "PROJECTION_STALE"
    building = projections.peek(who.tenant, who.workspace)
    assert building is not None and len(building.records) < len(ids)  # never handed out half-built
    with caplog.at_level(logging.INFO, logger="engram.search"):
        ready = await projections.current(who.tenant, who.workspace, "en", view.head)  # waits for the same build
    assert ready is building and sorted(ready.records) == sorted(ids) and ready.cursor >= view.head
    assert ready.index._tail_pairs == 0 and ready.index._frozen_pairs > 0  # a finished build is compacted
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("projection catch-up scope=") and "head=" in line for line in lines)
    assert any(line.startswith("projection caught up scope=") and f"records={len(ids)}" in line for line in lines)
    assert not any(who.tenant in line for line in lines)  # scopes are named by digest only


async def test_search_over_grpc_is_stale_while_building(storage: Storage) -> None:
    who, ids = await scope_with(storage, ["Harbour cranes stop in high wind."])
    slow = SlowStorage(storage.stub, 2.0)
    servicer = SearchServicer(Projections(slow, 30.0), CursorCodec(b"k" * 32))  # type: ignore[arg-type]
    running = await create_server(SearchSettings(cursor_key="k" * 32, grpc_port=0),
                                  lambda server: search_pb2_grpc.add_SearchServiceServicer_to_server(servicer, server),
                                  Transport.plaintext())
    caller = common_pb2.Caller(scope=who.scope, principal=who.principal, purpose_ref="purpose:test")
    request = search_pb2.SearchRequest(caller=caller, arguments_json=canonicalize(
        with_defaults("engram_memory_search", make_search_args("harbour cranes"))))
    try:
        async with Transport.plaintext().channel(f"127.0.0.1:{running.port}", "search") as channel:
            stub = search_pb2_grpc.SearchServiceStub(channel)
            assert await rpc_code(stub.Search(request, timeout=0.8)) == "PROJECTION_STALE"
            slow.delay = 0.0
            await asyncio.sleep(2.2)  # the build started by the first call finishes meanwhile
            reply = await stub.Search(request, timeout=10)
            assert '"record_id":"%s"' % ids[0] in reply.value_json.decode()
    finally:
        await running.server.stop(0)


async def test_the_budget_evicts_least_recently_used_scopes(storage: Storage, caplog) -> None:
    a, a_ids = await scope_with(storage, ["Alpha scope keeps the anchor log.", "Alpha anchor chain is 50 m."])
    b, b_ids = await scope_with(storage, ["Bravo scope keeps the sail plan."])
    c, c_ids = await scope_with(storage, ["Charlie scope keeps the fuel log."])
    probe = Projections(storage.stub, 30.0)
    one = max([(await probe.current(w.tenant, w.workspace)).estimate_bytes() for w in (a, b, c)])
    projections = Projections(storage.stub, 30.0, budget_bytes=2 * one + one // 2)  # two scopes fit, not three
    with caplog.at_level(logging.INFO, logger="engram.search"):
        for who in (a, b):
            await projections.current(who.tenant, who.workspace)
        await projections.current(a.tenant, a.workspace)  # a is now the most recently used
        await projections.current(c.tenant, c.workspace)
    assert projections.peek(b.tenant, b.workspace) is None  # least recently used: evicted
    assert projections.peek(a.tenant, a.workspace) is not None and projections.peek(c.tenant, c.workspace) is not None
    assert projections.evictions == 1 and projections.resident_bytes() <= 2 * one + one // 2
    evicted = [r.getMessage() for r in caplog.records if r.getMessage().startswith("projection evicted")]
    assert len(evicted) == 1 and "records=1" in evicted[0] and "budget_bytes=" in evicted[0]
    rebuilt = await projections.current(b.tenant, b.workspace)  # rebuilds from the journal
    assert sorted(rebuilt.records) == sorted(b_ids)
    assert projections.peek(a.tenant, a.workspace) is None  # now a was the least recent
    # The scope being served is never evicted, even alone over budget.
    tiny = Projections(storage.stub, 30.0, budget_bytes=1)
    assert sorted((await tiny.current(a.tenant, a.workspace)).records) == sorted(a_ids)
    assert sorted((await tiny.current(c.tenant, c.workspace)).records) == sorted(c_ids)
    assert tiny.peek(a.tenant, a.workspace) is None


def slow_apply(monkeypatch, seconds: float) -> list[tuple[float, float]]:
    """Make every batch's apply (in the pool) take ``seconds``; returns its (start, end) spans."""
    spans: list[tuple[float, float]] = []
    apply = projection_module._apply

    def slow(*args: object) -> None:
        start = time.monotonic()
        time.sleep(seconds)
        apply(*args)  # type: ignore[arg-type]
        spans.append((start, time.monotonic()))

    monkeypatch.setattr(projection_module, "_apply", slow)
    return spans


async def test_the_next_batch_is_read_while_one_is_applied(storage: Storage, monkeypatch) -> None:
    who, ids = await scope_with(storage, [f"Read-ahead record {i} of the harbour log." for i in range(5)])
    monkeypatch.setattr(projection_module, "JOURNAL_BATCH", 1)
    spans = slow_apply(monkeypatch, 0.15)
    clock = JournalClock(storage.stub)
    ready = await Projections(clock, 30.0).current(who.tenant, who.workspace)  # type: ignore[arg-type]
    assert sorted(ready.records) == sorted(ids) and len(spans) >= len(ids)
    # Storage was asked for the next batch while the previous one was still being applied.
    assert any(start < read < end for read in clock.reads for start, end in spans)


async def test_a_dropped_build_keeps_its_lock_until_the_pool_is_done(storage: Storage, monkeypatch) -> None:
    who, _ = await scope_with(storage, ["Lock record one.", "Lock record two."])
    monkeypatch.setattr(projection_module, "JOURNAL_BATCH", 1)
    spans = slow_apply(monkeypatch, 0.3)
    projections = Projections(storage.stub, 30.0)
    building = asyncio.ensure_future(projections.current(who.tenant, who.workspace))
    while projections.peek(who.tenant, who.workspace) is None or not projections.peek(who.tenant, who.workspace).lock.locked():
        await asyncio.sleep(0.01)
    projection = projections.peek(who.tenant, who.workspace)
    projections.drop(who.tenant, who.workspace)  # cancels the build mid-apply
    async with projection.lock:  # a search holding this projection waits for the pool's write
        acquired = time.monotonic()
    assert spans and acquired >= spans[-1][1]
    building.cancel()
    await asyncio.gather(building, return_exceptions=True)
    fresh = projections.peek(who.tenant, who.workspace)  # the search had started over on a new one
    if fresh is not None and fresh.catching_up is not None:
        projections.drop(who.tenant, who.workspace)
        await asyncio.gather(fresh.catching_up, return_exceptions=True)
