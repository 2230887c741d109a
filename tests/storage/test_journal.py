"""The per-scope journal: dense cursors under concurrency, the hash chain, paging."""

from __future__ import annotations

import asyncio

import pytest

from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.transport import Transport
from storage_service import journal
from storage_service.commits import JournalTxn
from storage_service.server import create
from storage_service.store import Scope
from tests.storage.helpers import Storage, Who, capture, enable, host_registry, rpc_code, transition_request

CONCURRENT = 24


async def test_concurrent_writers_get_dense_cursors_and_a_valid_chain(storage: Storage) -> None:
    who = Who()
    base = await enable(storage, who)
    answers = await asyncio.gather(*(capture(storage, who, f"Concurrent note {i}.") for i in range(CONCURRENT)))
    assert sorted(int(a["cursor"]) for a in answers) == list(range(base + 1, base + CONCURRENT + 1))
    scope = Scope(who.tenant, who.workspace)
    assert await journal.verify_chain(storage.deps.store, scope)
    assert await journal.head_cursor(storage.deps.store, scope) == base + CONCURRENT


async def test_a_refused_transition_takes_no_cursor(storage: Storage) -> None:
    who = Who()
    base = await enable(storage, who)
    candidate_id = (await capture(storage, who, "Once."))["candidate_id"]
    await storage.stub.Withdraw(transition_request(who, "engram_memory_withdraw", candidate_id))
    assert await rpc_code(storage.stub.Withdraw(transition_request(who, "engram_memory_withdraw", candidate_id))) == "ALREADY_TERMINAL"
    after = await capture(storage, who, "Twice.")
    assert after["cursor"] == str(base + 3)


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
    assert await enable(storage, who) == 1  # cursor 1: the enable's policy change
    for i in range(4):
        await capture(storage, who, f"Paged {i}.")
    first = await storage.stub.ReadJournal(storage_pb2.ReadJournalRequest(scope=who.scope, after_cursor="0", limit=1))
    assert [(e.operation, e.object_id, e.from_state, e.to_state) for e in first.events] == [
        ("policy_change", "policy", "0", "1")]
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


async def test_concurrent_writes_of_a_scope_commit_in_groups(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    commits = storage.deps.commits
    groups, bodies = commits.groups_committed, commits.bodies_committed
    await asyncio.gather(*(capture(storage, who, f"Grouped note {i}.") for i in range(CONCURRENT)))
    assert commits.bodies_committed - bodies == CONCURRENT
    assert commits.groups_committed - groups < CONCURRENT  # some shared a transaction


async def test_a_failing_write_fails_alone_and_takes_no_cursor(storage: Storage) -> None:
    """Illegal moves and conflicting replays queued among good writes: each fails with its
    own code, the others commit, and the cursors stay dense."""
    who = Who()
    base = await enable(storage, who)
    first = await capture(storage, who, "The original.", idempotency_key="same-key-0001")
    candidate_id = first["candidate_id"]
    withdraws = [storage.stub.Withdraw(transition_request(who, "engram_memory_withdraw", candidate_id))
                 for _ in range(3)]
    conflicting = capture(storage, who, "Another text under the same key.", idempotency_key="same-key-0001")
    good = [capture(storage, who, f"Good {i}.") for i in range(6)]
    results = await asyncio.gather(*withdraws, conflicting, *good, return_exceptions=True)
    codes = [await rpc_code(_raise(r)) if isinstance(r, BaseException) else "ok" for r in results]
    assert sorted(codes[:3]) == ["ALREADY_TERMINAL", "ALREADY_TERMINAL", "ok"]
    assert codes[3] == "DIGEST_CONFLICT" and codes[4:] == ["ok"] * 6
    scope = Scope(who.tenant, who.workspace)
    assert await journal.head_cursor(storage.deps.store, scope) == base + 1 + 1 + 6
    assert await journal.verify_chain(storage.deps.store, scope)


async def test_a_body_that_raises_is_isolated_in_its_group(storage: Storage) -> None:
    who = Who()
    base = await enable(storage, who)
    scope = Scope(who.tenant, who.workspace)

    async def good(txn: JournalTxn) -> int:
        return txn.append("probe", "obj", None, "pending").cursor

    async def broken(txn: JournalTxn) -> int:
        txn.append("probe", "broken", None, "pending")
        raise ValueError("a bug in one body")

    results = await asyncio.gather(*(storage.deps.commits.run(scope, broken if i % 3 == 1 else good)
                                     for i in range(9)), return_exceptions=True)
    assert [isinstance(r, ValueError) for r in results] == [i % 3 == 1 for i in range(9)]
    assert sorted(r for r in results if isinstance(r, int)) == list(range(base + 1, base + 7))
    assert await journal.verify_chain(storage.deps.store, scope)


async def test_two_storage_processes_write_one_scope_densely(storage: Storage) -> None:
    """A second storage replica on the same database: groups race on the scope head, the
    loser's transaction re-runs, the journal stays dense and chained."""
    second, close, _deps = await create(storage.settings.model_copy(update={"relay_enabled": False}),
                                        host_registry=host_registry())
    chan = Transport.plaintext().channel(f"127.0.0.1:{second.port}", "storage")
    try:
        other = Storage(storage_pb2_grpc.StorageServiceStub(chan), storage.admin, _deps,
                        f"127.0.0.1:{second.port}", storage.settings)
        who = Who()
        base = await enable(storage, who)
        answers = await asyncio.gather(*(capture(storage if i % 2 else other, who, f"Replica note {i}.")
                                         for i in range(CONCURRENT)))
        assert sorted(int(a["cursor"]) for a in answers) == list(range(base + 1, base + CONCURRENT + 1))
        assert await journal.verify_chain(storage.deps.store, Scope(who.tenant, who.workspace))
    finally:
        await chan.close()
        await second.stop(0)
        await close()


async def _raise(error: BaseException) -> None:
    raise error
