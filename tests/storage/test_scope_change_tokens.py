"""Storage publishes a scope's change token after every committed write group and before any
caller of the group is answered; a group whose token cannot be published answers
STORE_UNAVAILABLE (committed all the same: a retry replays and publishes). Reads publish
nothing. Real storage over gRPC, real MongoDB-protocol server, real Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest_asyncio
import redis.asyncio as aioredis

from engram_api.storage.v1 import storage_pb2
from engram_cli.datastores import free_port
from engram_core.errors import Code, EngramError
from engram_core.scope_changes import ChangePublisher, epoch_key, token_key
from engram_core.taskq import redis_prefix
from storage_service.commits import GroupCommitter, JournalTxn
from storage_service.journal import head_cursor
from storage_service.store import Scope
from engram_hostkit.examples import make_capture_args
from tests.storage.helpers import (PURPOSE, Storage, Who, accepted_record, capture, capture_request, enable, key,
                                   rpc_code)


@pytest_asyncio.fixture
async def tokens(storage: Storage, redis_url: str) -> AsyncIterator["Tokens"]:
    client = aioredis.Redis.from_url(redis_url)
    yield Tokens(client, redis_prefix(storage.settings.deployment))
    await client.aclose()


class Tokens:
    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix

    async def of(self, who: Who) -> bytes | None:
        value: bytes | None = await self.client.get(token_key(self.prefix, Scope(who.tenant, who.workspace).key))
        return value


async def test_every_write_moves_the_token_and_reads_do_not(storage: Storage, tokens: Tokens) -> None:
    who = Who()
    assert await tokens.of(who) is None
    await enable(storage, who)
    enabled = await tokens.of(who)
    assert enabled is not None  # the policy change is a write
    assert await tokens.client.get(epoch_key(tokens.prefix)) is not None  # written at storage start
    captured = await capture(storage, who)
    after_capture = await tokens.of(who)
    assert after_capture not in (None, enabled)
    await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope, with_head_cursor=True))
    assert await rpc_code(storage.stub.GetRecord(storage_pb2.GetRecordRequest(
        caller=who.caller, record_id="mem_" + "a" * 52))) == "NOT_FOUND"
    assert await tokens.of(who) == after_capture
    _, record_id = await accepted_record(storage, who, "A second decision worth keeping.")
    assert await tokens.of(who) != after_capture
    # Another scope's writes leave this one's token alone.
    mine = await tokens.of(who)
    other = Who()
    await enable(storage, other)
    await capture(storage, other)
    assert await tokens.of(who) == mine
    assert captured["status"] == "committed_pending" and record_id


async def test_a_group_whose_token_is_not_published_answers_store_unavailable(storage: Storage) -> None:
    """Committed, yet nobody is told before the readers can see it; the retry is answered."""
    who = Who()
    await enable(storage, who)
    scope = Scope(who.tenant, who.workspace)
    dead = ChangePublisher.connect(f"redis://127.0.0.1:{free_port()}/0", "dead:", timeout_seconds=0.5)
    blind = GroupCommitter(storage.deps.store, publish=dead.publish)
    before = await head_cursor(storage.deps.store, scope)

    async def append(txn: JournalTxn) -> int:
        return txn.append("capture", "cand_" + "b" * 26, None, "pending").cursor

    try:
        results = await asyncio.gather(blind.run(scope, append), blind.run(scope, append), return_exceptions=True)
    finally:
        await dead.close()
    assert all(isinstance(r, EngramError) and r.code is Code.STORE_UNAVAILABLE for r in results), results
    assert await head_cursor(storage.deps.store, scope) == before + 2  # both committed
    # The same storage's own committer publishes: a write through it is answered.
    assert await storage.deps.commits.run(scope, append) == before + 3


async def test_a_capture_retried_after_an_unpublished_group_replays(storage: Storage, tokens: Tokens) -> None:
    who = Who()
    await enable(storage, who)
    args = make_capture_args(idempotency_key=key("cap"), text="Kept, though its first answer was lost.",
                             purpose_ref=PURPOSE)
    dead = ChangePublisher.connect(f"redis://127.0.0.1:{free_port()}/0", "dead:", timeout_seconds=0.5)
    commits = storage.deps.commits
    publish, commits.publish = commits.publish, dead.publish  # this storage loses its Redis for one call
    try:
        assert await rpc_code(storage.stub.Capture(capture_request(who, args))) == "STORE_UNAVAILABLE"
    finally:
        commits.publish = publish
        await dead.close()
    before = await tokens.of(who)
    retried = json.loads((await storage.stub.Capture(capture_request(who, args))).value_json)
    assert retried["status"] == "duplicate_exact"  # the first attempt committed
    assert await tokens.of(who) != before  # and the replay published
