"""The MongoDB side of storage: the client, the collections, their indexes and the one
transaction helper. The driver (PyMongo's ``AsyncMongoClient``) is used only here and in the
repository modules that receive a :class:`Store`.

Collections (every scoped document carries ``scope`` = the scope digest, never raw ids):

| collection | holds |
|---|---|
| ``scopes`` | per scope: journal head cursor and head event digest (the hash chain), the operator policy |
| ``policies`` | legacy: where policies lived before (migrated into ``scopes`` at start) |
| ``journal`` | append-only events, unique ``(scope, cursor)`` |
| ``candidates`` | encrypted pending candidates, their state and recorded decision |
| ``records`` | encrypted records, their lifecycle state and expiry (``expires_ms`` while sweepable) |
| ``data_keys`` | one wrapped data key per candidate/record; destroyed on erasure |
| ``vectors`` | a record's semantic-channel window vectors, sealed under the record's data key (a cache: storage_service.vectors) |
| ``ledger`` | the idempotency ledger (TTL-expired after the retention) |
| ``outbox`` | effects to publish to Celery (key destruction, projection invalidation) |
| ``forgotten`` | keyed HMACs of tombstoned payload digests (never content) |
| ``migrations`` | the data migrations completed at start |
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pymongo import ASCENDING, AsyncMongoClient, monitoring
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.client_session import TransactionOptions
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, DuplicateKeyError, PyMongoError, ServerSelectionTimeoutError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from engram_core.dependency import Dependency
from engram_core.digests import scope_digest
from engram_core.errors import Code, EngramError
from engram_core.timefmt import parse_instant

T = TypeVar("T")
log = logging.getLogger("engram.storage")
Session = AsyncClientSession

# A transaction that lost a unique-key race is re-run: the re-run sees the winner's writes.
DUPLICATE_RETRIES = 5
# Acknowledged means durable: a majority of the replica set has the write in its journal (on
# SecantusDB, started with --sync-on-commit, the WiredTiger log is fsynced at each commit).
DURABLE = WriteConcern("majority", j=True)
# How often the driver checks the server, and how long a connection (and so a heartbeat) may
# take: a database that stops answering is seen within about 7 s (logged, readiness follows).
# Not shorter: a loaded SecantusDB can take a second or two to answer a heartbeat.
HEARTBEAT_MS = 2000
CONNECT_TIMEOUT_MS = 5000
# Writes of what can be computed again (storage_service.vectors): lost on a crash, never wrong.
CACHE_WRITES = WriteConcern(w=1, j=False)
TRANSACTIONS = TransactionOptions(read_concern=ReadConcern("majority"), write_concern=DURABLE)


@dataclass(frozen=True)
class Scope:
    tenant: str
    workspace: str

    @property
    def key(self) -> str:
        """The scope digest: the partition key stored with every scoped document."""
        return scope_digest(self.tenant, self.workspace)


class _Heartbeats(monitoring.ServerHeartbeatListener):
    """The driver's server monitor tells :attr:`Store.mongo` when the database goes and comes."""

    def __init__(self, dependency: Dependency) -> None:
        self._dependency = dependency

    def started(self, event: monitoring.ServerHeartbeatStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.ServerHeartbeatSucceededEvent) -> None:
        self._dependency.ok()

    def failed(self, event: monitoring.ServerHeartbeatFailedEvent) -> None:
        self._dependency.failed("heartbeat_failed")


# Ids per ``$in`` query of :func:`find_by_ids`. The MongoDB-protocol server used here matches
# each document an index found against the ``$in`` list one entry at a time, so one query of n
# ids costs n² comparisons (1,000 ids: ~1 s of its CPU, which bound a projection rebuild to ~240
# records/s); queries of 64 cost n·64 and ~1 ms each of overhead. MongoDB itself is indifferent.
IN_CHUNK = 64


async def find_by_ids(collection: Any, ids: list[str], query: dict[str, Any] | None = None,
                      projection: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The documents of ``collection`` whose ``_id`` is in ``ids`` (and match ``query``), by id,
    in queries of at most :data:`IN_CHUNK` ids."""
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), IN_CHUNK):
        cursor = collection.find({"_id": {"$in": ids[start:start + IN_CHUNK]}, **(query or {})}, projection)
        found.update({doc["_id"]: doc async for doc in cursor})
    return found


class Store:
    """Collections of one engram database and the transaction helper. ``mongo`` is the
    database's reachability as the driver's heartbeats and this store's transactions see it
    (logged on each change; storage's readiness follows it)."""

    def __init__(self, client: AsyncMongoClient[Any], db_name: str, mongo: Dependency | None = None) -> None:
        self.client = client
        self.mongo = mongo or Dependency("mongodb", log)
        self.db: AsyncDatabase[Any] = client.get_database(
            db_name, write_concern=DURABLE, read_concern=ReadConcern("majority")
        )
        self.scopes = self.db.scopes
        # Where scope policies lived before they moved into the scope document (migrated).
        self.legacy_policies = self.db.policies
        self.journal = self.db.journal
        self.candidates = self.db.candidates
        self.records = self.db.records
        self.data_keys = self.db.data_keys
        # A cache of derived data (re-embedded when lost): acknowledged without the journal fsync.
        self.vectors = self.db.get_collection("vectors", write_concern=CACHE_WRITES)
        self.ledger = self.db.ledger
        self.outbox = self.db.outbox
        self.forgotten = self.db.forgotten
        # Digests of confirmation jtis storage has spent (storage_service.authority).
        self.confirmations = self.db.confirmations
        # One document per data migration _migrate has completed.
        self.migrations = self.db.migrations

    @classmethod
    def connect(cls, url: str, db_name: str) -> "Store":
        # retryWrites=False: the writes made outside a transaction (relay marks, key destruction,
        # outbox completion) are idempotent and re-driven by the relay or the task's retry, and a
        # retryable write costs SecantusDB a walk of its whole reply registry (docs/storage.md).
        # Transactions and their commit retries do not depend on it.
        mongo = Dependency("mongodb", log)
        return cls(AsyncMongoClient(url, tz_aware=True, serverSelectionTimeoutMS=5000, w="majority", journal=True,
                                    retryWrites=False, event_listeners=[_Heartbeats(mongo)],
                                    heartbeatFrequencyMS=HEARTBEAT_MS, connectTimeoutMS=CONNECT_TIMEOUT_MS), db_name, mongo)

    async def ensure_indexes(self) -> None:
        await self.journal.create_index([("scope", ASCENDING), ("cursor", ASCENDING)], unique=True)
        await self.journal.create_index([("scope", ASCENDING), ("object_id", ASCENDING)])
        await self.candidates.create_index([("admission_request_id", ASCENDING)], sparse=True)
        await self.candidates.create_index([("scope", ASCENDING), ("state", ASCENDING)])
        await self.records.create_index([("scope", ASCENDING), ("payload_digest", ASCENDING), ("state", ASCENDING)])
        await self.ledger.create_index([("expires_at", ASCENDING)], expireAfterSeconds=0)
        await self.confirmations.create_index([("expires_at", ASCENDING)], expireAfterSeconds=0)
        # Owed rows only (outbox.NOT_DUE): finished rows lose next_attempt_at, the index skips them.
        await self.outbox.create_index([("next_attempt_at", ASCENDING)], sparse=True, name="owed_by_due_time")
        await self.outbox.create_index([("object_id", ASCENDING)])
        # Records the expiry sweep still owes (storage_service.expiry: unset once out of reach).
        await self.records.create_index([("expires_ms", ASCENDING)], sparse=True, name="owed_expiry")
        await self._migrate()

    async def _migrate(self) -> None:
        """Bring a database written by an earlier version to the current shapes (idempotent)."""
        async for doc in self.legacy_policies.find({}):
            # Policies moved into the scope document (one read for policy and journal head);
            # one already there is newer than the legacy copy.
            current = await self.scopes.find_one({"_id": doc["_id"]}, {"policy": 1})
            if current is None or "policy" not in current:
                fields = {k: doc[k] for k in ("tenant", "workspace", "policy") if k in doc}
                await self.scopes.update_one({"_id": doc["_id"]}, {"$set": fields}, upsert=True)
            await self.legacy_policies.delete_one({"_id": doc["_id"]})
        if await self.migrations.find_one({"_id": "record_expiry_fields"}) is None:
            # Records written before the sweeper kept their expiry as text only: give the ones
            # it may still expire the sortable instant its index walks.
            async for doc in self.records.find({"expires_at": {"$exists": True}, "expires_ms": {"$exists": False},
                                                "state": {"$in": ["accepted_current", "accepted_disputed", "historical"]}},
                                               {"expires_at": 1}):
                await self.records.update_one({"_id": doc["_id"]},
                                              {"$set": {"expires_ms": parse_instant(doc["expires_at"])}})
            await self.migrations.update_one({"_id": "record_expiry_fields"}, {"$set": {"done": True}}, upsert=True)
        indexes = await self.outbox.index_information()
        if "state_1_next_attempt_at_1" in indexes:
            await self.outbox.drop_index("state_1_next_attempt_at_1")
            await self.outbox.update_many({"state": {"$in": ["done", "dead"]}, "next_attempt_at": {"$exists": True}},
                                          {"$unset": {"next_attempt_at": ""}})

    async def transaction(self, body: Callable[[Session], Awaitable[T]]) -> T:
        """Run ``body`` in one MongoDB transaction (retried on transient errors and on a lost
        unique-key race). Driver failures become STORE_UNAVAILABLE; other errors pass. Bodies
        that append to a scope's journal go through :mod:`storage_service.commits` instead."""
        for attempt in range(DUPLICATE_RETRIES):
            try:
                async with self.client.start_session(default_transaction_options=TRANSACTIONS) as session:
                    return await session.with_transaction(body)
            except DuplicateKeyError:
                if attempt == DUPLICATE_RETRIES - 1:
                    raise EngramError(Code.STORE_UNAVAILABLE) from None
            except PyMongoError as exc:
                # Driver messages may quote document values: log the class and code only.
                log.error("transaction failed: %s code=%s", type(exc).__name__, getattr(exc, "code", None))
                if isinstance(exc, (ConnectionFailure, ServerSelectionTimeoutError)):
                    self.mongo.failed("operation_failed")
                raise EngramError(Code.STORE_UNAVAILABLE) from None
        raise EngramError(Code.STORE_UNAVAILABLE)

    async def ping(self) -> None:
        await self.client.admin.command("ping")

    async def close(self) -> None:
        await self.client.close()
