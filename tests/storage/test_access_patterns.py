"""The write path's cost does not grow with the store (issue 7, docs/storage.md "Queries and
indexes").

Every storage operation runs at two store sizes (one scope); the documents the database
examines for it must be the same at both. On SecantusDB (the default) the server runs in this
process and its storage layer is instrumented: rows yielded by a collection scan and
candidates produced by an index lookup are counted per collection, for the connection threads
only (not the TTL sweeper). Against a real MongoDB (``ENGRAM_TEST_MONGO_URL``) the commands
are recorded with a command listener and re-run as ``explain`` (executionStats) instead.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pymongo import MongoClient, monitoring

from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_cli import datastores
from engram_core.transport import Transport
from engram_core.taskq import DESTROY_KEY, INVALIDATE_PROJECTION, make_celery
from storage_service.outbox import Relay
from storage_service.server import create
from storage_service.settings import StorageSettings
from storage_service.store import Scope
from tests.storage.helpers import (ADMIN_TOKEN, AUDIENCE, HOST_REGISTRY, Storage, Who, begin_request, capture, enable,
                                   host_registry, transition_request)

SMALL, LARGE = 12, 120
# No row relayed (or owed by a caller) during the test comes due again before it ends: a resend
# landing between a step's settle and the relay step would be counted as that step's (seen once,
# on a loaded machine, with 10 s).
RESEND_AFTER = 3600.0
QUERY_COMMANDS = {"find", "update", "findAndModify", "delete", "count", "aggregate"}


class SecantusCounter:
    """Counts, per collection, the documents an in-process SecantusDB examines."""

    def __init__(self) -> None:
        self.scanned: Counter[str] = Counter()
        self.indexed: Counter[str] = Counter()
        self._lock = threading.Lock()

    @staticmethod
    def _counted() -> bool:
        return threading.current_thread().name.startswith("secantus-conn-")

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from secantus.storage import Storage as ServerStorage

        scan, lookup, counter = ServerStorage._scan_docs, ServerStorage._try_index_id_keys, self

        def counted_scan(storage: Any, db: str, coll: str) -> Iterator[Any]:
            for row in scan(storage, db, coll):
                if counter._counted():
                    with counter._lock:
                        counter.scanned[coll] += 1
                yield row

        def counted_lookup(storage: Any, db: str, coll: str, *args: Any, **kwargs: Any) -> Any:
            found = lookup(storage, db, coll, *args, **kwargs)
            if found is not None and counter._counted():
                with counter._lock:
                    counter.indexed[coll] += len(found)
            return found

        monkeypatch.setattr(ServerStorage, "_scan_docs", counted_scan)
        monkeypatch.setattr(ServerStorage, "_try_index_id_keys", counted_lookup)

    def take(self) -> dict[str, Counter[str]]:
        with self._lock:
            taken = {"scanned": self.scanned, "indexed": self.indexed}
            self.scanned, self.indexed = Counter(), Counter()
        return taken


class ExplainCounter(monitoring.CommandListener):
    """Against a real MongoDB: records the query commands and explains them afterwards."""

    def __init__(self, url: str, db_name: str) -> None:
        self._url, self._db = url, db_name
        self._commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in QUERY_COMMANDS and event.database_name == self._db:
            command = {k: v for k, v in event.command.items()
                       if k not in ("lsid", "txnNumber", "autocommit", "startTransaction", "$clusterTime",
                                    "readConcern", "writeConcern", "$db", "$readPreference")}
            self._commands.append(command)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> dict[str, Counter[str]]:
        commands, self._commands = self._commands, []
        scanned: Counter[str] = Counter()
        indexed: Counter[str] = Counter()
        with MongoClient(self._url) as client:
            db = client[self._db]
            for command in commands:
                name = next(iter(command))
                stats = db.command({"explain": command, "verbosity": "executionStats"})["executionStats"]
                plan = json.dumps(stats.get("executionStages", {}), default=str)
                (scanned if "COLLSCAN" in plan else indexed)[str(command[name])] += stats.get("totalDocsExamined", 0)
        return {"scanned": scanned, "indexed": indexed}


@pytest.fixture(scope="module")
def counted_mongo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    given = datastores.env_url("ENGRAM_TEST_MONGO_URL")
    if given:
        yield given, None
        return
    from secantus.server import SecantusDBServer

    counter = SecantusCounter()
    patcher = pytest.MonkeyPatch()
    counter.install(patcher)
    server = SecantusDBServer(port=0, storage_path=str(tmp_path_factory.mktemp("counted-mongo")),
                              ttl_sweep_seconds=0)
    server.start()
    host, port = server.address
    yield f"mongodb://{host}:{port}/?directConnection=true", counter
    server.stop()
    patcher.undo()


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def counted(counted_mongo: tuple[str, Any], redis_url: str,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Storage, Any, Relay]]:
    url, counter = counted_mongo
    tag = uuid.uuid4().hex[:8]
    settings = StorageSettings(
        grpc_host="127.0.0.1", grpc_port=0, mongo_url=url, mongo_db=f"ap_{tag}", redis_url=redis_url,
        deployment=f"ap-{tag}", keyring=tmp_path_factory.mktemp("ap") / "keyring.json", dev_keyring=True,
        admin_token=ADMIN_TOKEN, relay_enabled=False, grpc_plaintext=True,
        host_registry=str(HOST_REGISTRY), audience=AUDIENCE, relay_resend_after_seconds=RESEND_AFTER,
    )
    if counter is None:
        counter = ExplainCounter(url, settings.mongo_db)
        monitoring.register(counter)
    running, close, deps = await create(settings, host_registry=host_registry())
    chan = Transport.plaintext().channel(f"127.0.0.1:{running.port}", "storage")
    from engram_api.admin.v1 import admin_pb2_grpc

    storage = Storage(storage_pb2_grpc.StorageServiceStub(chan), admin_pb2_grpc.AdminServiceStub(chan), deps,
                      f"127.0.0.1:{running.port}", settings)
    relay = Relay(deps.store, make_celery(settings), interval=1.0, resend_after=RESEND_AFTER, max_attempts=10)
    yield storage, counter, relay
    await chan.close()
    await running.stop(0)
    await deps.store.client.drop_database(settings.mongo_db)
    await close()


async def admit_once(storage: Storage, who: Who, candidate_id: str) -> str:
    begun = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    await storage.stub.OpenCandidate(storage_pb2.OpenCandidateRequest(request_id=begun.request_id))
    done = await storage.stub.CommitDecision(storage_pb2.CommitDecisionRequest(
        request_id=begun.request_id, decision="accept", reason="policy", trust="asserted"))
    return str(json.loads(done.outcome_json)["record_id"])


# Stored window vectors (storage_service.vectors): one 384-float window a record.
VECTOR_MODEL = "sha256:" + "ab" * 32
WINDOW = b"\0" * (384 * 4)


def store_vectors(who: Who, record_id: str) -> storage_pb2.StoreVectorsRequest:
    return storage_pb2.StoreVectorsRequest(scope=who.scope, vector_model=VECTOR_MODEL, items=[
        storage_pb2.RecordVectors(record_id=record_id, vectors=WINDOW)])


async def fill(storage: Storage, who: Who, upto: int, have: int) -> None:
    for i in range(have, upto):
        cap = await capture(storage, who, text=f"Fill memory {i}: the ledger keeps its answers.")
        record_id = await admit_once(storage, who, cap["candidate_id"])
        await storage.stub.StoreVectors(store_vectors(who, record_id))


async def outbox_id(storage: Storage, task: str, object_id: str) -> str:
    row = await storage.deps.store.outbox.find_one({"task": task, "object_id": object_id}, {"_id": 1})
    assert row is not None
    return str(row["_id"])


async def measure(storage: Storage, counter: Any, relay: Relay, who: Who) -> dict[str, dict[str, Counter[str]]]:
    """Runs each operation once on a fresh object and returns what each one examined."""
    stub, seen = storage.stub, {}

    async def step(name: str, op: Callable[[], Awaitable[Any]], settle: bool = True) -> Any:
        if settle:
            await relay.relay_once()  # due rows of earlier steps are not this step's cost
        counter.take()
        result = await op()
        seen[name] = counter.take()
        return result

    cap = await step("capture", lambda: capture(storage, who, text=f"Measured {uuid.uuid4().hex}"))
    begun = await step("begin_admission", lambda: stub.BeginAdmission(begin_request(who, cap["candidate_id"])))
    await step("open_candidate", lambda: stub.OpenCandidate(storage_pb2.OpenCandidateRequest(request_id=begun.request_id)))
    done = await step("commit_decision", lambda: stub.CommitDecision(storage_pb2.CommitDecisionRequest(
        request_id=begun.request_id, decision="accept", reason="policy", trust="asserted")))
    record_id = json.loads(done.outcome_json)["record_id"]
    await step("store_vectors", lambda: stub.StoreVectors(store_vectors(who, record_id)))
    await step("fetch_with_vectors", lambda: stub.FetchRecords(storage_pb2.FetchRecordsRequest(
        scope=who.scope, record_ids=[record_id], vector_model=VECTOR_MODEL)))
    await step("get", lambda: stub.GetRecord(storage_pb2.GetRecordRequest(caller=who.caller, record_id=record_id)))
    await step("journal_page", lambda: stub.ReadJournal(storage_pb2.ReadJournalRequest(
        scope=who.scope, after_cursor="3", limit=5)))
    pending = await capture(storage, who, text=f"To withdraw {uuid.uuid4().hex}")
    await step("withdraw", lambda: stub.Withdraw(transition_request(who, "engram_memory_withdraw",
                                                                    pending["candidate_id"])))
    await step("forget", lambda: stub.Forget(transition_request(who, "engram_memory_forget", record_id)))
    # The forget's effects: the record key's destruction and the projection invalidation.
    assert await step("relay", relay.relay_once, settle=False) == 2
    destroy = await outbox_id(storage, DESTROY_KEY, record_id)
    await step("destroy_key", lambda: stub.DestroyKey(storage_pb2.DestroyKeyRequest(outbox_id=destroy)))
    invalidate = await outbox_id(storage, INVALIDATE_PROJECTION, record_id)
    await step("record_coverage", lambda: stub.RecordCoverage(storage_pb2.RecordCoverageRequest(
        outbox_id=invalidate, surfaces=["lexical"], replicas=["search-0:50052"])))
    return seen


@pytest.mark.asyncio(loop_scope="session")
async def test_no_operation_examines_more_documents_in_a_larger_store(counted: tuple[Storage, Any, Relay]) -> None:
    storage, counter, relay = counted
    who = Who()
    await enable(storage, who)
    # Other scopes' data must not be examined either: a second scope grows alongside.
    other = Who()
    await enable(storage, other)
    await fill(storage, who, SMALL, 0)
    await fill(storage, other, SMALL, 0)
    small = await measure(storage, counter, relay, who)
    await fill(storage, who, LARGE, SMALL)
    await fill(storage, other, LARGE // 4, SMALL)
    large = await measure(storage, counter, relay, who)

    assert small.keys() == large.keys()
    for name in small:
        scans = {c: n for c, n in (small[name]["scanned"] + large[name]["scanned"]).items() if n}
        assert scans == {}, f"{name} scans {scans}"
        assert sum(large[name]["indexed"].values()) <= sum(small[name]["indexed"].values()), (
            f"{name} examined {dict(small[name]['indexed'])} at {SMALL} and {dict(large[name]['indexed'])} at {LARGE}")


def test_the_counter_tells_a_scan_from_an_index_lookup(counted_mongo: tuple[str, Any]) -> None:
    """The instrument itself: an unindexed filter examines every document, an ``_id`` one."""
    url, counter = counted_mongo
    with MongoClient(url) as client:
        db = client[f"ap_probe_{uuid.uuid4().hex[:6]}"]
        db.probe.insert_many([{"_id": i, "n": i} for i in range(50)])
        if counter is None:
            def examined(query: dict[str, Any]) -> int:
                return int(db.command({"explain": {"update": "probe", "updates": [{"q": query, "u": {"$set": {"s": 1}}}]},
                                       "verbosity": "executionStats"})["executionStats"]["totalDocsExamined"])
            assert (examined({"n": 49}), examined({"_id": 49})) == (50, 1)
        else:
            counter.take()
            db.probe.update_one({"n": 49}, {"$set": {"s": 1}})
            assert counter.take()["scanned"]["probe"] == 50
            db.probe.update_one({"_id": 49}, {"$set": {"s": 1}})
            taken = counter.take()
            assert (taken["scanned"]["probe"], taken["indexed"]["probe"]) == (0, 1)
        client.drop_database(db.name)
