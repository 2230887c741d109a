"""The invalidation task reaches every search replica (real gRPC servers) or records nothing:
coverage is never partial, and the receipt names the replicas that acknowledged."""

from __future__ import annotations

import asyncio
import json

import pytest

from admission_worker.replicas import SearchReplicas, check_spec, resolve_all
from admission_worker.tasks import TaskClients, TransientTaskError, run_invalidation
from engram_core.taskq import INVALIDATE_PROJECTION
from search_service.server import create
from search_service.settings import SearchSettings
from engram_core.transport import Transport
from tests.storage.helpers import Storage, Who, accepted_record, enable, transition_request

FORGET = "engram_memory_forget"


async def search_replica(storage: Storage, replica_id: str):  # -> (RunningServer, close)
    settings = SearchSettings(storage_addr=storage.addr, cursor_key="k" * 32, grpc_port=0, replica_id=replica_id,
                              grpc_plaintext=True)
    return await create(settings)


async def test_every_replica_or_nothing(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Forget me on every replica.")
    forget = transition_request(who, FORGET, record_id)
    await storage.stub.Forget(forget)
    row = await storage.deps.store.outbox.find_one({"object_id": record_id, "task": INVALIDATE_PROJECTION})
    (a, close_a), (b, close_b) = await search_replica(storage, "search-a"), await search_replica(storage, "search-b")
    try:
        live = f"127.0.0.1:{a.port},127.0.0.1:{b.port}"
        down = TaskClients.connect(Transport.plaintext(), storage.addr, "unused", 5, search_replicas=live + ",127.0.0.1:1")
        with pytest.raises(TransientTaskError):
            await asyncio.to_thread(run_invalidation, down, row["_id"])
        assert (await storage.deps.store.outbox.find_one({"_id": row["_id"]}))["state"] != "done"
        both = TaskClients.connect(Transport.plaintext(), storage.addr, "unused", 5, search_replicas=live)
        digest = await asyncio.to_thread(run_invalidation, both, row["_id"])
        done = await storage.deps.store.outbox.find_one({"_id": row["_id"]})
        assert done["state"] == "done" and done["coverage_receipt"]["receipt_digest"] == digest
        assert done["coverage_receipt"]["replicas"] == ["search-a", "search-b"]
        assert done["coverage_receipt"]["surfaces"] == ["lexical_index", "page_cache", "vectors"]
        assert await asyncio.to_thread(run_invalidation, both, row["_id"]) == "already_done"
        retry = transition_request(who, FORGET, record_id, idem=forget.idempotency_key)
        replay = json.loads((await storage.stub.Forget(retry)).value_json)
        assert replay["projection_invalidation"] == "complete" and replay["coverage_receipt_digest"] == digest
    finally:
        for server, close in ((a, close_a), (b, close_b)):
            await server.server.stop(0)
            await close()


def test_replica_targets() -> None:
    assert SearchReplicas("", "engram-search:50052").targets() == ["engram-search:50052"]
    assert SearchReplicas(" 10.0.0.2:1 ,10.0.0.1:1,10.0.0.2:1", "x").targets() == ["10.0.0.1:1", "10.0.0.2:1"]
    assert SearchReplicas("[::1]:7", "x").targets() == ["[::1]:7"]
    fake = {"search-headless": ["10.1.0.5:50052", "10.1.0.6:50052"]}
    assert SearchReplicas("search-headless:50052", "x", resolver=lambda host, port: fake[host]).targets() == fake["search-headless"]
    assert "127.0.0.1:9" in resolve_all("localhost", 9)
    for bad in ("host", "host:", ":1", "host:0", "host:65536", "host:x"):
        with pytest.raises(ValueError):
            check_spec(bad)
    assert check_spec("a:1, b:2") == "a:1, b:2"
    with pytest.raises(OSError):
        SearchReplicas("no-such-host.invalid:1", "x").targets()
