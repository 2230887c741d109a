"""The per-scope journal: dense cursors under concurrency, the hash chain, paging."""

from __future__ import annotations

import asyncio

import pytest

from engram_api.storage.v1 import storage_pb2
from storage_service import journal
from storage_service.store import Scope
from tests.storage.helpers import Storage, Who, capture, enable, rpc_code, transition_request

CONCURRENT = 24


async def test_concurrent_writers_get_dense_cursors_and_a_valid_chain(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    answers = await asyncio.gather(*(capture(storage, who, f"Concurrent note {i}.") for i in range(CONCURRENT)))
    assert sorted(int(a["cursor"]) for a in answers) == list(range(1, CONCURRENT + 1))
    scope = Scope(who.tenant, who.workspace)
    assert await journal.verify_chain(storage.deps.store, scope)
    assert await journal.head_cursor(storage.deps.store, scope) == CONCURRENT


async def test_a_refused_transition_takes_no_cursor(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    candidate_id = (await capture(storage, who, "Once."))["candidate_id"]
    await storage.stub.Withdraw(transition_request(who, "engram_memory_withdraw", candidate_id))
    assert await rpc_code(storage.stub.Withdraw(transition_request(who, "engram_memory_withdraw", candidate_id))) == "ALREADY_TERMINAL"
    after = await capture(storage, who, "Twice.")
    assert after["cursor"] == "3"


async def test_tampering_breaks_the_chain(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    for i in range(3):
        await capture(storage, who, f"Chained {i}.")
    scope = Scope(who.tenant, who.workspace)
    assert await journal.verify_chain(storage.deps.store, scope)
    await storage.deps.store.journal.update_one({"scope": scope.key, "cursor": 2}, {"$set": {"operation": "withdraw"}})
    assert not await journal.verify_chain(storage.deps.store, scope)


async def test_read_journal_pages_after_a_cursor(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    for i in range(5):
        await capture(storage, who, f"Paged {i}.")
    page = await storage.stub.ReadJournal(storage_pb2.ReadJournalRequest(scope=who.scope, after_cursor="2", limit=2))
    assert [e.cursor for e in page.events] == ["3", "4"] and page.head_cursor == "5"
    assert all(e.operation == "capture" and e.to_state == "pending" for e in page.events)
    rest = await storage.stub.ReadJournal(storage_pb2.ReadJournalRequest(scope=who.scope, after_cursor="4", limit=10))
    assert [e.cursor for e in rest.events] == ["5"]
    empty = await storage.stub.ReadJournal(storage_pb2.ReadJournalRequest(scope=Who().scope, after_cursor="0"))
    assert list(empty.events) == [] and empty.head_cursor == "0"


@pytest.mark.parametrize("cursor", ["01", "-1", "x", "1.0", "99999999999999999999"])
async def test_non_canonical_cursors_are_refused(storage: Storage, cursor: str) -> None:
    request = storage_pb2.ReadJournalRequest(scope=Who().scope, after_cursor=cursor)
    assert await rpc_code(storage.stub.ReadJournal(request)) == "INVALID_SCHEMA"


async def test_the_journal_holds_no_content(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    await capture(storage, who, "Zanzibar marmalade recipe number nine.")
    async for event in storage.deps.store.journal.find({"scope": Scope(who.tenant, who.workspace).key}):
        assert "marmalade" not in repr(event) and who.tenant not in repr(event)
