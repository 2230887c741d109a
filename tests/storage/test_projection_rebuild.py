"""The operator's projection rebuild (SPEC §12): one journal event, fanned out by the worker to
every search replica (real gRPC servers), each of which drops the scope and builds it again
from the journal on its next search; the answer names the replicas that acknowledged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from admission_worker.tasks import TaskClients, run_invalidation
from engram_api.admin.v1 import admin_pb2
from engram_core.policy import PROJECTION_OBJECT_ID
from engram_core.taskq import INVALIDATE_PROJECTION
from engram_core.transport import Transport
from search_service.cursors import CursorCodec
from search_service.projection import Projections
from search_service.service import SearchServicer
from storage_service.store import Scope
from tests.storage.helpers import BEARER, Storage, Who, accepted_record, enable, rpc_code, search_server
from tests.storage.test_search_forwarded_view import ids_of, request, view

REASON = "ticket:OPS-7"


def rebuild(who: Who, wait: float = 0.0, reason: str = REASON) -> admin_pb2.RebuildProjectionRequest:
    return admin_pb2.RebuildProjectionRequest(scope=who.scope, reason_ref=reason, wait_seconds=wait)


async def owed_row(storage: Storage, who: Who) -> dict[str, Any]:
    """The invalidation outbox row a rebuild wrote (polled: the rebuild call is still waiting)."""
    for _ in range(200):
        row = await storage.deps.store.outbox.find_one(
            {"object_id": PROJECTION_OBJECT_ID, "task": INVALIDATE_PROJECTION, "scope": Scope(who.tenant, who.workspace).key})
        if row is not None:
            return row
        await asyncio.sleep(0.02)
    raise AssertionError("no outbox row")


async def head(storage: Storage, who: Who) -> str:
    return (await view(storage, who)).head_cursor


async def test_a_rebuild_reaches_every_replica_and_each_rebuilds_from_the_journal(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "The lighthouse lamp was replaced in May.")
    projections = [Projections(storage.stub, 30.0) for _ in range(2)]
    servicers = [SearchServicer(p, CursorCodec(b"k" * 32), replica_id=f"search-{n}") for n, p in zip("ab", projections)]
    async with search_server(servicers[0]) as (a, addr_a), search_server(servicers[1]) as (b, addr_b):
        for stub in (a, b):
            assert ids_of(await stub.Search(request(who, "lighthouse lamp"), timeout=10)) == [record_id]
        assert all(p.peek(who.tenant, who.workspace) is not None for p in projections)
        # 60 s is the longest wait; the worker's part below answers it at once.
        call = asyncio.ensure_future(storage.admin.RebuildProjection(rebuild(who, wait=60), metadata=BEARER))
        row = await owed_row(storage, who)
        clients = TaskClients.connect(Transport.plaintext(), storage.addr, "unused", 5,
                                      search_replicas=f"{addr_a},{addr_b}")
        digest = await asyncio.to_thread(run_invalidation, clients, row["_id"])
        answer = json.loads((await asyncio.wait_for(call, 10)).value_json)
        assert answer["projection_invalidation"] == "complete" and answer["coverage_receipt_digest"] == digest
        assert answer["replicas"] == ["search-a", "search-b"]
        assert answer["receipt"]["operation"] == "projection_rebuild"
        assert answer["receipt"]["cursor"] == await head(storage, who)
        assert all(p.peek(who.tenant, who.workspace) is None for p in projections)
        # Each replica builds the scope again from the journal; the rebuild event moved no record.
        for stub in (a, b):
            assert ids_of(await stub.Search(request(who, "lighthouse lamp", await view(storage, who)),
                                            timeout=10)) == [record_id]
    history = json.loads((await storage.admin.ObjectHistory(
        admin_pb2.ObjectHistoryRequest(scope=who.scope, object_id=PROJECTION_OBJECT_ID), metadata=BEARER)).value_json)
    assert history["state"] == "rebuilt 1 times"
    (event,) = history["events"]
    assert (event["operation"], event["actor"], event["cursor"]) == ("projection_rebuild", "operator",
                                                                   answer["receipt"]["cursor"])
    assert REASON not in json.dumps(history)  # the reason's digest, never the reference itself
    verified = json.loads((await storage.admin.VerifyJournal(
        admin_pb2.VerifyJournalRequest(scope=who.scope), metadata=BEARER)).value_json)
    assert verified["ok"] is True


async def test_without_a_worker_the_rebuild_is_recorded_and_owed(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    answer = json.loads((await storage.admin.RebuildProjection(rebuild(who, wait=0), metadata=BEARER)).value_json)
    assert answer["projection_invalidation"] == "pending" and "replicas" not in answer
    row = await owed_row(storage, who)
    assert row["state"] != "done" and row["object_id"] == PROJECTION_OBJECT_ID


@pytest.mark.parametrize("change,code", [
    ({"reason": ""}, "INVALID_SCHEMA"),
    ({"reason": "x" * 513}, "INVALID_SCHEMA"),
    ({"wait": -0.001}, "INVALID_SCHEMA"),
    ({"wait": 60.001}, "INVALID_SCHEMA"),
    ({"wait": float("nan")}, "INVALID_SCHEMA"),
])
async def test_bad_requests_are_refused_and_append_nothing(storage: Storage, change: dict[str, Any], code: str) -> None:
    who = Who()
    await enable(storage, who)
    before = await head(storage, who)
    assert await rpc_code(storage.admin.RebuildProjection(rebuild(who, **change), metadata=BEARER)) == code
    assert await head(storage, who) == before


async def test_a_scope_that_never_held_anything_is_not_found(storage: Storage) -> None:
    who = Who()
    assert await rpc_code(storage.admin.RebuildProjection(rebuild(who), metadata=BEARER)) == "NOT_FOUND"
    assert await head(storage, who) == "0"


class GatedStorage:
    """The storage stub with ReadJournal held until ``release`` is set."""

    def __init__(self, stub: object) -> None:
        self._stub = stub
        self.reading = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        method = getattr(self._stub, name)
        if name != "ReadJournal":
            return method

        async def gated(*args: object, **kwargs: object) -> object:
            self.reading.set()
            await self.release.wait()
            return await method(*args, **kwargs)

        return gated


async def test_a_search_waiting_on_a_build_that_is_dropped_starts_over(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Dropped mid-build, built again.")
    gated = GatedStorage(storage.stub)
    projections = Projections(gated, 30.0)  # type: ignore[arg-type]
    target = int(await head(storage, who))
    waiting = asyncio.ensure_future(projections.current(who.tenant, who.workspace, head=target, wait_seconds=10))
    await asyncio.wait_for(gated.reading.wait(), 5)
    first = projections.peek(who.tenant, who.workspace)
    assert projections.drop(who.tenant, who.workspace) == set()  # nothing applied yet
    gated.release.set()
    built = await asyncio.wait_for(waiting, 10)
    assert built is not first and built is projections.peek(who.tenant, who.workspace)
    assert built.cursor == target and list(built.records) == [record_id]
    assert projections.drop(who.tenant, who.workspace) == {record_id}
    assert projections.drop(who.tenant, who.workspace) == set()
