"""FetchRecords, the search projection's read: bounded by bytes per reply with the rest deferred
(a catch-up batch of large records must never exceed the gRPC message limit), request order,
one data-key query per call; and the search projection collects every deferred record."""

from __future__ import annotations

import json

from engram_api.storage.v1 import storage_pb2
from search_service.projection import Projections
from storage_service.reads import MAX_FETCH_REPLY_BYTES
from engram_hostkit.examples import make_capture_args
from tests.storage.helpers import PURPOSE, Storage, Who, admit, capture_request, enable, key

BIG_TEXT_BYTES = 900 * 1024
BIG_RECORDS = 20  # ~18 MiB of records: more than one 16 MiB gRPC message


COMPONENT_TEXT_BYTES = 65_536  # SPEC §5: a component's text


def chunks(text: str) -> list[str]:
    return [text[i:i + COMPONENT_TEXT_BYTES] for i in range(0, len(text), COMPONENT_TEXT_BYTES)]


async def capture_long(storage: Storage, who: Who, text: str) -> dict:
    """A capture of ``text`` (ASCII) as the components it needs within the SPEC's bound."""
    first, *rest = chunks(text)
    args = make_capture_args(idempotency_key=key("cap"), text=first, purpose_ref=PURPOSE)
    args["payload"]["components"] += [
        {"component_id": f"comp-{n}", "kind": "context", "text": part, "citation_ids": ["cite-1"]}
        for n, part in enumerate(rest, start=2)
    ]
    reply = await storage.stub.Capture(capture_request(who, args))
    return json.loads(reply.value_json)


def text_of(record: dict) -> str:
    return "".join(component["text"] for component in record["components"])


async def admitted(storage: Storage, who: Who, texts: list[str]) -> list[str]:
    ids = []
    for text in texts:
        candidate_id = (await capture_long(storage, who, text))["candidate_id"]
        outcome = await admit(storage, who, candidate_id)
        assert outcome["status"] == "accepted", outcome
        ids.append(outcome["record_id"])
    return ids


async def test_replies_stay_within_the_byte_budget_and_defer_the_rest(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    texts = [f"Record {i} " + ("lorem ipsum dolor " * (BIG_TEXT_BYTES // 18)) for i in range(BIG_RECORDS)]
    ids = await admitted(storage, who, texts)
    wanted, seen, replies = list(reversed(ids)), [], 0
    while wanted:
        reply = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(scope=who.scope, record_ids=wanted))
        replies += 1
        size = sum(len(item.record_json) for item in reply.records)
        assert reply.records and (size <= MAX_FETCH_REPLY_BYTES or len(reply.records) == 1)
        got = [item.record_id for item in reply.records]
        assert got == wanted[:len(got)]  # request order, a prefix of what was asked
        assert list(reply.deferred_ids) == wanted[len(got):]
        assert all(item.state == "accepted_current" for item in reply.records)
        seen += got
        wanted = list(reply.deferred_ids)
    assert seen == list(reversed(ids)) and replies >= 4  # 18 MiB in replies of at most 4 MiB
    assert text_of(json.loads(reply.records[-1].record_json)) == texts[0]


async def test_small_batches_come_whole_and_unknown_ids_are_left_out(storage: Storage) -> None:
    who, other = Who(), Who()
    await enable(storage, who)
    await enable(storage, other)
    ids = await admitted(storage, who, [f"Small fact number {i}." for i in range(3)])
    foreign = (await admitted(storage, other, ["Another scope's fact."]))[0]
    unknown = "mem_" + "a" * 52
    reply = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(
        scope=who.scope, record_ids=[ids[2], unknown, foreign, ids[0], ids[1]]))
    assert [item.record_id for item in reply.records] == [ids[2], ids[0], ids[1]]
    assert list(reply.deferred_ids) == []


async def test_the_search_projection_collects_deferred_records(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    texts = [f"Harbour log {i} " + ("tide and current " * (BIG_TEXT_BYTES // 17)) for i in range(BIG_RECORDS)]
    ids = await admitted(storage, who, texts)
    projections = Projections(storage.stub, 30.0)
    projection = await projections.current(who.tenant, who.workspace)
    assert sorted(projection.records) == sorted(ids)
    assert int((projection.scores("harbour tide") > 0).sum()) == BIG_RECORDS


class CountingStorage:
    """The storage stub with a count of the calls made through it, by method name."""

    def __init__(self, stub: object) -> None:
        self._stub = stub
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> object:
        method = getattr(self._stub, name)

        async def counted(*args: object, **kwargs: object) -> object:
            self.calls[name] = self.calls.get(name, 0) + 1
            return await method(*args, **kwargs)

        return counted


async def test_an_idle_search_reads_no_journal(storage: Storage) -> None:
    """The policy answer carries the journal head: a projection already at the head costs one
    storage call per search; a write makes the next one catch up."""
    who = Who()
    await enable(storage, who)
    first = await admitted(storage, who, ["The pier lights switch on at dusk."])
    counting = CountingStorage(storage.stub)
    projections = Projections(counting, 30.0)  # type: ignore[arg-type]

    async def search() -> list[str]:
        view = await projections.policy(who.tenant, who.workspace)
        projection = await projections.current(who.tenant, who.workspace, view.policy.language, view.head)
        return sorted(projection.records)

    assert await search() == first
    built = dict(counting.calls)
    assert built["ReadJournal"] >= 1 and built["FetchRecords"] == 1
    for _ in range(3):
        assert await search() == first
    assert counting.calls["ReadJournal"] == built["ReadJournal"]  # idle: no journal read
    assert counting.calls["GetScopePolicy"] == built["GetScopePolicy"] + 3
    second = await admitted(storage, who, ["The pier lights switch off at dawn."])
    assert await search() == sorted(first + second)
    assert counting.calls["ReadJournal"] > built["ReadJournal"]
    head = (await projections.policy(who.tenant, who.workspace)).head
    assert head == (await projections.current(who.tenant, who.workspace)).cursor
