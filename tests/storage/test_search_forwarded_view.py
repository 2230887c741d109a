"""A search forwarded by the gateway carries the scope's policy and journal head as storage
answered them for that call: the search service then makes no storage round trip of its own
when its projection is current, still catches up to the forwarded head, applies the forwarded
redaction allowlist, and refuses a malformed view with POLICY_UNAVAILABLE. Without a view
(another internal client) it reads policy and head itself."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2, search_pb2_grpc
from engram_api.storage.v1 import storage_pb2
from engram_core.canonical import canonicalize
from engram_core.schemas.validate import with_defaults
from engram_hostkit.examples import make_search_args
from search_service.cursors import CursorCodec
from search_service.projection import Projections
from search_service.service import SearchServicer
from tests.storage.helpers import Storage, Who, accepted_record, enable, rpc_code, serving_search


class CountingStorage:
    """The storage stub, counting the calls the search service makes."""

    def __init__(self, stub: object) -> None:
        self._stub = stub
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> object:
        method = getattr(self._stub, name)

        async def counted(*args: object, **kwargs: object) -> object:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted


@pytest.fixture
async def search(storage: Storage) -> AsyncIterator[tuple[search_pb2_grpc.SearchServiceStub, CountingStorage]]:
    counting = CountingStorage(storage.stub)
    servicer = SearchServicer(Projections(counting, 30.0), CursorCodec(b"k" * 32))  # type: ignore[arg-type]
    async with serving_search(servicer) as stub:
        yield stub, counting


async def view(storage: Storage, who: Who) -> storage_pb2.ScopePolicyResponse:
    """What the gateway reads before it forwards a search."""
    return await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope, with_head_cursor=True))


def request(who: Who, query: str, policy: storage_pb2.ScopePolicyResponse | None = None,
            **override: Any) -> search_pb2.SearchRequest:
    caller = common_pb2.Caller(scope=who.scope, principal=who.principal, purpose_ref="purpose:test")
    forwarded: dict[str, Any] = {}
    if policy is not None:
        forwarded = {"policy_json": policy.policy_json, "head_cursor": policy.head_cursor}
    forwarded.update(override)
    return search_pb2.SearchRequest(caller=caller, arguments_json=canonicalize(
        with_defaults("engram_memory_search", make_search_args(query))), **forwarded)


def ids_of(reply: search_pb2.SearchResponse) -> list[str]:
    return [packet["record"]["record_id"] for packet in json.loads(reply.value_json)["records"]]


async def test_a_forwarded_view_spares_the_policy_read_and_still_catches_up(storage: Storage, search: Any) -> None:
    stub, counting = search
    who = Who()
    await enable(storage, who)
    _, first = await accepted_record(storage, who, "The lighthouse lamp was replaced in May.")
    assert ids_of(await stub.Search(request(who, "lighthouse lamp", await view(storage, who)), timeout=10)) == [first]
    assert counting.calls["GetScopePolicy"] == 0 and counting.calls["ReadJournal"] >= 1
    reads = counting.calls["ReadJournal"]
    # Idle: the projection is at the forwarded head, so nothing is read from storage at all.
    await stub.Search(request(who, "lighthouse", await view(storage, who)), timeout=10)
    assert counting.calls["ReadJournal"] == reads and counting.calls["GetScopePolicy"] == 0
    # A newer head forwarded: the projection catches up to it before answering.
    _, second = await accepted_record(storage, who, "The lighthouse keeper logs every ship.")
    found = ids_of(await stub.Search(request(who, "lighthouse", await view(storage, who)), timeout=10))
    assert sorted(found) == sorted([first, second]) and counting.calls["ReadJournal"] > reads
    assert counting.calls["GetScopePolicy"] == 0


async def test_without_a_view_the_search_service_reads_it_itself(storage: Storage, search: Any) -> None:
    stub, counting = search
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Ferries pause when fog rolls in.")
    assert ids_of(await stub.Search(request(who, "ferries fog"), timeout=10)) == [record_id]
    assert counting.calls["GetScopePolicy"] == 1


async def test_the_forwarded_allowlist_is_the_one_applied(storage: Storage, search: Any) -> None:
    stub, _ = search
    who = Who()
    await enable(storage, who, redaction_allowlist=["record_id", "components"])
    await accepted_record(storage, who, "Snow chains are kept in the north shed.")
    reply = await stub.Search(request(who, "snow chains", await view(storage, who)), timeout=10)
    packet = json.loads(reply.value_json)["records"][0]
    assert sorted(packet["record"]) == ["components", "record_id"]
    assert "/citations" in packet["redacted_fields"]


@pytest.mark.parametrize("override", [
    {"policy_json": b"not json"},
    {"policy_json": b"[1, 2]"},
    {"policy_json": b"{}", "head_cursor": "minus one"},
    {"policy_json": b"{}", "head_cursor": "-1"},
])
async def test_a_malformed_forwarded_view_is_policy_unavailable(storage: Storage, search: Any,
                                                                override: dict[str, Any]) -> None:
    stub, counting = search
    who = Who()
    await enable(storage, who)
    assert await rpc_code(stub.Search(request(who, "anything", **override), timeout=10)) == "POLICY_UNAVAILABLE"
    assert counting.calls["ReadJournal"] == 0
