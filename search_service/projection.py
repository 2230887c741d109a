"""Per-scope search projections, kept current by tailing the storage journal.

A projection holds the scope's ``accepted_current`` records (decrypted, in memory, as the
JSON text storage sent) in a lexical index. Before every answer it catches up to the journal head, so a record that left
``accepted_current`` (forget, expiry, …) is gone before the next search answers, and the
answer can name the cursor it is valid through. A fresh replica builds each scope lazily from
the journal on first use.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import grpc

from engram_api.common.v1 import common_pb2
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.canonical import Encoded, canonicalize, is_plain
from engram_core.digests import scope_digest
from engram_core.errors import Code, EngramError
from engram_core.dependency import Dependency, observe_rpc
from engram_core.grpc_errors import error_from_rpc
from engram_core.policy import UNPROJECTED_OPERATIONS, ScopePolicy
from engram_core.redaction import project
from engram_core.timefmt import parse_instant
from search_service.analyzer import DEFAULT_LANGUAGE
from search_service.doctable import DocTable
from search_service.embedding import Embedder, Vectors, from_wire, to_wire
from search_service.lexical import FloatArray, LexicalIndex, fields_of
from search_service.packets import PacketPart
from search_service.ranking import DocMeta
from search_service.semantic import VectorIndex, record_text

JOURNAL_BATCH = 1000
ACCEPTED = "accepted_current"
DEFAULT_BUDGET_BYTES = 1024 * 1024 * 1024
PROGRESS_SECONDS = 5.0
# Python objects per record beyond its JSON text and the numeric buffers (the vocabulary's
# strings and dictionary, the id maps): measured with bench/search_bench.py --tracemalloc after
# a build (traced bytes per record minus buffers: ~610 B at 20k records, with ~2 unique tokens a
# record; headroom for texts richer in unique tokens).
RECORD_OVERHEAD_BYTES = 768

log = logging.getLogger("engram.search")


COMPACT_MIN_DEAD = 1024
# Bytes of vectors per StoreVectors call (well below the 16 MiB message limit).
STORE_VECTORS_BYTES = 4 * 1024 * 1024
# Redacted records kept per scope for the next pages that show them (a packet's record part
# costs a parse, a redaction receipt and an encoding: ~30 % of a page at 1k records, measured).
PACKET_PARTS = 1024
EMBEDDING_FAILED = "embedding failed on a record"


@dataclass
class ScopeProjection:
    """One scope's ``accepted_current`` records: the JSON (for packets), the slot table, the
    lexical index over it and, when the semantic channel is on, the window vectors of every
    record (``vectors``; None: the channel is off for this scope, ``semantic_fault`` says
    why). Hold ``lock`` for every read and write."""

    index: LexicalIndex = field(default_factory=LexicalIndex)
    table: DocTable = field(default_factory=DocTable)
    vectors: VectorIndex | None = None
    semantic_fault: str | None = None
    records: dict[str, bytes] = field(default_factory=dict)
    # Ids of the (rare) records whose JSON the C encoder does not write canonically (floats,
    # keys outside the BMP): their packets take the full canonical encoder.
    mixed: set[str] = field(default_factory=set)
    cursor: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Canonical JSON bytes of the records held (what storage sent).
    json_bytes: int = 0
    catching_up: asyncio.Task[None] | None = None
    # The packet parts of recently shown records (see packet_part), least recently used first:
    # record id → (the allowlist they were redacted by, the part), and their JSON's size.
    parts: OrderedDict[str, tuple[tuple[str, ...] | None, PacketPart]] = field(default_factory=OrderedDict)
    parts_bytes: int = 0
    # The lexical engine's profile config in canonical JSON, once written (profile_config_json).
    _config_json: bytes | None = field(default=None, init=False, repr=False)

    def profile_config_json(self) -> bytes:
        """The lexical engine's part of the ranking profile config (hashed into every rank
        receipt) in canonical JSON, written on first use: a projection keeps its index (and so
        the index's language and config) for life."""
        if self._config_json is None:
            self._config_json = canonicalize(dict(self.index.profile_config()))
        return self._config_json

    def estimate_bytes(self) -> int:
        """Resident estimate: record JSON, posting and column buffers, the packet parts kept,
        and a calibrated per-record cost of the Python objects (see RECORD_OVERHEAD_BYTES)."""
        vectors = 0 if self.vectors is None else self.vectors.nbytes()
        return (self.json_bytes + self.index.nbytes() + self.table.nbytes() + vectors + self.parts_bytes
                + RECORD_OVERHEAD_BYTES * (len(self.records) + len(self.parts)))

    def cancel_catch_up(self) -> None:
        if self.catching_up is not None and not self.catching_up.done():
            self.catching_up.cancel()

    def add(self, record: dict[str, Any], cursor: int, raw: bytes | None = None, windows: Vectors | None = None) -> None:
        """Index ``record`` as accepted at journal ``cursor`` (replacing an older version).
        ``raw`` is its JSON as storage sent it (kept instead of the parsed dicts: a page parses
        only its own packets); canonical JSON of ``record`` when not given. ``windows``: the
        vectors of :func:`~search_service.semantic.record_text` (required while ``vectors``
        is kept)."""
        if self.vectors is not None and windows is None:
            raise ValueError("window vectors required while the semantic channel is on")
        record_id = record["record_id"]
        if raw is None:
            raw = canonicalize(record)
        retention = record.get("retention") or {}
        expires = retention.get("expires_at")
        meta = DocMeta(
            record_id=record_id,
            valid_from_ms=record["valid_time"]["t"],
            valid_to_ms=record["valid_time"].get("t_end"),
            expires_at_ms=parse_instant(expires) if expires else None,
        )
        fields = fields_of(record)
        self.remove(record_id)
        slot = self.table.add(meta, cursor, len(raw))
        self.index.add(slot, fields)
        if self.vectors is not None and windows is not None:
            self.vectors.add(slot, windows)
        self.records[record_id] = raw
        if not is_plain(record):
            self.mixed.add(record_id)
        self.json_bytes += len(raw)

    def record(self, record_id: str) -> dict[str, Any]:
        """The record held under ``record_id`` (parsed on each call: the caller owns it)."""
        parsed: dict[str, Any] = json.loads(self.records[record_id])
        return parsed

    def packet_part(self, record_id: str, allowlist: list[str] | None) -> PacketPart:
        """The packet of the record held under ``record_id``, redacted by ``allowlist``
        (:func:`~engram_core.redaction.project`), in canonical JSON around its score and rank
        (:class:`~search_service.packets.PacketPart`); the last :data:`PACKET_PARTS` are kept
        (and dropped with their record) for the next pages that show them."""
        key = None if allowlist is None else tuple(allowlist)
        held = self.parts.get(record_id)
        if held is not None and held[0] == key:
            self.parts.move_to_end(record_id)
            return held[1]
        self._drop_part(record_id)
        projected = project(self.record(record_id), allowlist)
        record = Encoded.of(projected["record"], plain=record_id not in self.mixed)
        part = PacketPart({**projected, "record": record})
        self.parts[record_id] = (key, part)
        self.parts_bytes += len(part)
        while len(self.parts) > PACKET_PARTS:
            self._drop_part(next(iter(self.parts)))
        return part

    def _drop_part(self, record_id: str) -> None:
        held = self.parts.pop(record_id, None)
        if held is not None:
            self.parts_bytes -= len(held[1])

    def remove(self, record_id: str) -> bool:
        """Drop a record from every surface; returns whether it was here."""
        raw = self.records.pop(record_id, None)
        self.mixed.discard(record_id)
        self._drop_part(record_id)
        slot = self.table.remove(record_id)
        if slot is None or raw is None:
            return False
        self.json_bytes -= int(self.table.sizes[slot])
        self.index.remove(slot, fields_of(json.loads(raw)))
        if self.vectors is not None:
            self.vectors.remove(slot)
        if self.table.dead >= max(COMPACT_MIN_DEAD, len(self.table)):
            remap = self.table.compact()
            self.index.remap(remap, self.table.size)
            if self.vectors is not None:
                self.vectors.remap(remap, self.table.size)
        return True

    def scores(self, query: str) -> FloatArray:
        """The lexical channel's score per table slot."""
        return self.index.scores(query, self.table.size)

    def similarities(self, query: Vectors) -> FloatArray:
        """The semantic channel's best-window cosine per table slot (the channel must be on)."""
        if self.vectors is None:
            raise ValueError("the semantic channel is off for this scope")
        return self.vectors.similarities(query, self.table.size)

    def semantic_off(self, reason: str) -> None:
        """Stop the semantic channel for this scope (its vectors dropped; lexical goes on)."""
        self.vectors, self.semantic_fault = None, reason


@dataclass(frozen=True)
class ScopeView:
    policy: ScopePolicy
    head: int

    @classmethod
    def of(cls, policy_json: bytes, head_cursor: str) -> "ScopeView":
        """From GetScopePolicy's answer (with_head_cursor), wherever it was read."""
        try:
            head = int(head_cursor or "0")
        except ValueError:
            raise EngramError(Code.POLICY_UNAVAILABLE) from None
        if head < 0:
            raise EngramError(Code.POLICY_UNAVAILABLE)
        return cls(ScopePolicy.from_json(policy_json), head)


class Projections:
    """All scopes this replica holds, least recently used first, within a memory budget.

    Catching up runs as one background task per scope (a search that arrives meanwhile waits
    for it, up to its own deadline, then answers ``PROJECTION_STALE``, never a partial
    answer); each journal batch is applied under the scope's lock. After every batch the
    resident estimate of all scopes is checked against ``budget_bytes`` and whole scopes are
    evicted, least recently used first (never the one being served; it rebuilds on its next
    search).
    """

    def __init__(self, storage: storage_pb2_grpc.StorageServiceStub, rpc_seconds: float, *,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES, progress_seconds: float = PROGRESS_SECONDS,
                 embedder: Embedder | None = None, pool: Executor | None = None) -> None:
        """``embedder``: the semantic channel's model (None: the channel is off); records are
        embedded in ``pool`` as each journal batch is applied, before the batch takes the lock."""
        self._storage = storage
        self._embedder = embedder
        self._pool = pool
        self._rpc_seconds = rpc_seconds
        self._budget = budget_bytes
        self._progress_seconds = progress_seconds
        self._scopes: OrderedDict[tuple[str, str], ScopeProjection] = OrderedDict()
        self.evictions = 0
        self.storage = Dependency("storage", log)
        self._storing: set[asyncio.Future[None]] = set()

    def peek(self, tenant: str, workspace: str) -> ScopeProjection | None:
        return self._scopes.get((tenant, workspace))

    def drop(self, tenant: str, workspace: str) -> set[str]:
        """Forget the scope's projection (its catch-up cancelled; a search waiting on it starts
        over on a fresh one): the record ids it held."""
        projection = self._scopes.pop((tenant, workspace), None)
        if projection is None:
            return set()
        projection.cancel_catch_up()
        log.info("projection dropped scope=%s records=%d bytes=%d", _scope_id((tenant, workspace)),
                 len(projection.records), projection.estimate_bytes())
        return set(projection.records.copy())  # a copy in one step: a pool thread may still write

    def resident_bytes(self) -> int:
        return sum(p.estimate_bytes() for p in self._scopes.values())

    async def current(self, tenant: str, workspace: str, language: str = DEFAULT_LANGUAGE,
                      head: int | None = None, wait_seconds: float | None = None) -> ScopeProjection:
        """The scope's projection in the scope's search ``language``, caught up at least to
        ``head`` (the journal head just read with the policy; None: whatever the journal says
        now). Hold ``.lock`` to read it. A language change starts a fresh projection (every
        record is analysed anew). A projection already at ``head`` reads no journal (an idle
        search costs one storage call). ``wait_seconds``: how long to wait for a catch-up in
        progress (a cold rebuild) before ``PROJECTION_STALE``; None waits for it."""
        key = (tenant, workspace)
        deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
        while True:
            projection = self._scopes.get(key)
            if projection is None or projection.index.language != language:
                # New, or a language change (every record is analysed anew). A head behind the
                # projection's cursor is no sign of anything: a search's head may be older than
                # a concurrent one's catch-up (after a restore, the operator rebuilds).
                if projection is not None:
                    projection.cancel_catch_up()
                projection = self._scopes[key] = ScopeProjection(
                    LexicalIndex(language), vectors=None if self._embedder is None else VectorIndex())
            self._scopes.move_to_end(key)
            if await self._caught_up(key, projection, head, deadline):
                return projection
            # Dropped while we waited (an operator's rebuild, an eviction): start over.

    async def _caught_up(self, key: tuple[str, str], projection: ScopeProjection, head: int | None,
                         deadline: float | None) -> bool:
        """Wait until ``projection`` reaches ``head`` (one catch-up when None); False when the
        projection was dropped meanwhile."""
        while head is None or projection.cursor < head:
            task = projection.catching_up
            if task is None or task.done():
                task = projection.catching_up = asyncio.create_task(self._catch_up(key, projection))
                task.add_done_callback(_retrieve)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(asyncio.shield(task), remaining)
            except TimeoutError:
                raise EngramError(Code.PROJECTION_STALE) from None
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if (current is not None and current.cancelling()) or self._scopes.get(key) is projection:
                    raise  # this search was cancelled, not the projection's catch-up
                return False
            if self._scopes.get(key) is not projection:
                return False
            if head is None:
                break
        return True

    async def policy(self, tenant: str, workspace: str) -> ScopeView:
        """The scope's operator policy (language, redaction allowlist, …) and journal head."""
        reply = await self._call(
            self._storage.GetScopePolicy,
            storage_pb2.GetScopePolicyRequest(scope=common_pb2.Scope(tenant=tenant, workspace=workspace),
                                              with_head_cursor=True),
        )
        return ScopeView.of(reply.policy_json, reply.head_cursor)

    async def _read_batch(self, scope: common_pb2.Scope, after: int, vector_model: str = "") -> "_Batch":
        """One journal batch after ``after`` and the records it accepted (fetched, still
        accepted ones, with their stored vectors of ``vector_model``), not yet applied."""
        reply = await self._call(
            self._storage.ReadJournal,
            storage_pb2.ReadJournalRequest(scope=scope, after_cursor=str(after), limit=JOURNAL_BATCH),
        )
        removed: list[str] = []
        to_fetch: dict[str, int] = {}
        for event in reply.events:
            if event.operation in UNPROJECTED_OPERATIONS:
                continue  # a policy change, a reveal: no record moved
            if event.to_state == ACCEPTED:
                to_fetch[event.object_id] = int(event.cursor)
            else:
                to_fetch.pop(event.object_id, None)
                removed.append(event.object_id)
        fetched, stored = await self._fetch(scope, to_fetch, vector_model) if to_fetch else ([], {})
        last = int(reply.events[-1].cursor) if reply.events else None
        return _Batch(int(reply.head_cursor or "0"), last, removed, to_fetch, fetched, stored)

    async def _catch_up(self, key: tuple[str, str], projection: ScopeProjection) -> None:
        """Apply journal batches until the head. The next batch is read (journal and records)
        while the current one is applied in the pool, so storage's work and this replica's
        overlap; batches are applied in journal order, each under the scope's lock."""
        scope = common_pb2.Scope(tenant=key[0], workspace=key[1])
        started = last_report = time.monotonic()
        reported = False
        batches = 0
        model = self._embedder.vector_model if self._embedder is not None and projection.vectors is not None else ""
        pending: asyncio.Task[_Batch] | None = asyncio.ensure_future(self._read_batch(scope, projection.cursor, model))
        try:
            while pending is not None:
                batch = await pending
                more = batch.last is not None and batch.last < batch.head
                pending = asyncio.ensure_future(self._read_batch(scope, batch.last, model)) if more else None
                windows = await self._embed(key, projection, batch.fetched, batch.stored)
                async with projection.lock:
                    await self._in_pool(_apply, projection, batch, windows)
                self._enforce_budget(key)
                now = time.monotonic()
                if more and now - last_report >= self._progress_seconds:
                    last_report, reported = now, True
                    log.info("projection catch-up scope=%s cursor=%d head=%d records=%d elapsed_s=%.1f",
                             _scope_id(key), projection.cursor, batch.head, len(projection.records), now - started)
                batches += 1
            if batches > 1:
                # A build (not a search's small catch-up): keep the index in its compact form.
                async with projection.lock:
                    await self._in_pool(_compact_form, projection)
            if reported:
                log.info("projection caught up scope=%s cursor=%d records=%d bytes=%d elapsed_s=%.1f",
                         _scope_id(key), projection.cursor, len(projection.records),
                         projection.estimate_bytes(), time.monotonic() - started)
        finally:
            if pending is not None:
                pending.cancel()

    async def _in_pool(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` in the pool and wait for it even when cancelled meanwhile: the
        caller holds the scope's lock, which must not be released while the pool still writes."""
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            await asyncio.wait([future])
            raise

    async def _embed(self, key: tuple[str, str], projection: ScopeProjection,
                     fetched: list[tuple[dict[str, Any], bytes]], stored: dict[str, Vectors]) -> list[Vectors] | None:
        """The window vectors of ``fetched``: those ``stored`` in storage for this model, the
        rest embedded off the event loop (batched) and handed to storage for every later build
        (:meth:`_keep`); None when the channel is off for the scope or the model failed on this
        batch."""
        if self._embedder is None or projection.vectors is None:
            return None
        missing = [i for i, (record, _) in enumerate(fetched) if record["record_id"] not in stored]
        computed: list[Vectors] = []
        if missing:
            texts = [record_text(fetched[i][0]) for i in missing]
            try:
                computed = await asyncio.get_running_loop().run_in_executor(self._pool, self._embedder.embed_many, texts)
            except Exception as exc:  # noqa: BLE001 - any model failure turns the channel off, never the scope
                log.error("semantic channel off scope=%s: %s (%s)", _scope_id(key), EMBEDDING_FAILED, type(exc).__name__)
                return None
            self._keep(key, self._embedder.vector_model,
                       [(fetched[i][0]["record_id"], vectors) for i, vectors in zip(missing, computed)])
        by_position = dict(zip(missing, computed))
        return [by_position[i] if i in by_position else stored[record["record_id"]]
                for i, (record, _) in enumerate(fetched)]

    def _keep(self, key: tuple[str, str], model: str, items: list[tuple[str, Vectors]]) -> None:
        """Hand freshly embedded vectors to storage in the background (a search never waits for
        it; a failure only means the next build embeds them again)."""
        task = asyncio.ensure_future(self._store_vectors(key, model, items))
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    async def _store_vectors(self, key: tuple[str, str], model: str, items: list[tuple[str, Vectors]]) -> None:
        scope = common_pb2.Scope(tenant=key[0], workspace=key[1])
        request = storage_pb2.StoreVectorsRequest(scope=scope, vector_model=model)
        size = 0
        try:
            for record_id, vectors in items:
                data = to_wire(vectors)
                if request.items and size + len(data) > STORE_VECTORS_BYTES:
                    await self._call(self._storage.StoreVectors, request)
                    request = storage_pb2.StoreVectorsRequest(scope=scope, vector_model=model)
                    size = 0
                request.items.add(record_id=record_id, vectors=data)
                size += len(data)
            if request.items:
                await self._call(self._storage.StoreVectors, request)
        except EngramError as exc:
            log.warning("vectors not stored scope=%s: %s", _scope_id(key), exc.code.value)

    async def vectors_kept(self) -> None:
        """Wait for the vectors being handed to storage (tests, shutdown)."""
        while self._storing:
            await asyncio.wait(set(self._storing))

    def _enforce_budget(self, serving: tuple[str, str]) -> None:
        resident = self.resident_bytes()
        for key in list(self._scopes):
            if resident <= self._budget:
                return
            if key == serving:
                continue
            projection = self._scopes.pop(key)
            projection.cancel_catch_up()
            size = projection.estimate_bytes()
            resident -= size
            self.evictions += 1
            log.info("projection evicted scope=%s records=%d bytes=%d resident_bytes=%d budget_bytes=%d evictions=%d",
                     _scope_id(key), len(projection.records), size, resident, self._budget, self.evictions)
        if resident > self._budget:
            log.warning("projection over budget scope=%s bytes=%d budget_bytes=%d",
                        _scope_id(serving), resident, self._budget)

    async def _fetch(self, scope: common_pb2.Scope, ids: dict[str, int],
                     vector_model: str = "") -> tuple[list[tuple[dict[str, Any], bytes]], dict[str, Vectors]]:
        """Fetch ``ids`` (still accepted ones, parsed and as sent) and the vectors storage holds
        for them under ``vector_model``, by record id; storage answers at most 4 MiB per reply
        and defers the rest, which is asked for again until none is left."""
        wanted = list(ids)
        fetched: list[tuple[dict[str, Any], bytes]] = []
        stored: dict[str, Vectors] = {}
        while wanted:
            reply = await self._call(
                self._storage.FetchRecords,
                storage_pb2.FetchRecordsRequest(scope=scope, record_ids=wanted, vector_model=vector_model),
            )
            for item in reply.records:
                if item.state == ACCEPTED and item.record_json:
                    fetched.append((json.loads(item.record_json), item.record_json))
                    vectors = from_wire(item.vectors) if item.vectors else None
                    if vectors is not None:
                        stored[item.record_id] = vectors
            deferred = list(reply.deferred_ids)
            if len(deferred) >= len(wanted):
                raise EngramError(Code.PROJECTION_STALE)  # no progress: never loop forever
            wanted = deferred
        return fetched, stored

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            reply = await method(request, timeout=self._rpc_seconds)
        except grpc.aio.AioRpcError as exc:
            observe_rpc(self.storage, exc)
            raise error_from_rpc(exc) from None
        self.storage.ok()
        return reply


@dataclass(frozen=True)
class _Batch:
    """A journal batch read ahead: the head then, the batch's last cursor (None: no events),
    the ids that left ``accepted_current``, the accepted ones with their cursors, those
    still accepted, fetched (parsed, and as sent), and their stored vectors."""

    head: int
    last: int | None
    removed: list[str]
    cursors: dict[str, int]
    fetched: list[tuple[dict[str, Any], bytes]]
    # Window vectors storage held for fetched records (semantic channel on), by record id.
    stored: dict[str, Vectors] = field(default_factory=dict)


def _apply(projection: ScopeProjection, batch: _Batch, windows: list[Vectors] | None) -> None:
    """Apply one journal batch (the caller holds the scope's lock)."""
    if windows is None and projection.vectors is not None:
        projection.semantic_off(EMBEDDING_FAILED)
    for record_id in batch.removed:
        projection.remove(record_id)
    for i, (record, raw) in enumerate(batch.fetched):
        projection.add(record, batch.cursors[record["record_id"]], raw, None if windows is None else windows[i])
    if batch.last is not None:
        projection.cursor = batch.last


def _compact_form(projection: ScopeProjection) -> None:
    projection.index.freeze()
    if projection.vectors is not None:
        projection.vectors.trim()


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a catch-up's failure as seen (the next search starts a new one)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("projection catch-up failed: %s", getattr(task.exception(), "code", type(task.exception()).__name__))


def _scope_id(key: tuple[str, str]) -> str:
    """A short, stable name of a scope for logs (a digest, not the tenant itself)."""
    return scope_digest(*key)[7:23]
