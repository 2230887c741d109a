"""SearchService: rank the caller's scope at the current pin, budget the packets, sign the
page cursor, issue the rank receipt (SPEC §5 engram_memory_search, §9)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import grpc

from engram_api.search.v1 import search_pb2, search_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.digests import canonical_with_digest, digest, with_digest
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import rpc_boundary
from engram_core.timefmt import format_instant, now_ms
from search_service.budget import CURSOR_FIELD, DIGEST_PLACEHOLDER, cursor_placeholder, fit_packets
from search_service.cursors import MAX_TOKEN_LENGTH, CursorCodec, CursorState
from search_service.embedding import Embedder
from search_service.projection import Projections, ScopeProjection, ScopeView
from search_service.ranking import PROFILE, profile_config
from search_service.semantic import MIN_SIMILARITY, VectorIndex
from search_service.topk import Channel, Hits, top_k

log = logging.getLogger("engram.search")

SURFACES = ("lexical_index", "page_cache")
SEMANTIC_SURFACE = "vectors"
SEMANTIC_DISABLED = "semantic channel disabled by configuration"
DEADLINE_MARGIN_SECONDS = 0.25
DEFAULT_PINNED_HITS = 200
DEFAULT_PAGE_CACHE_BYTES = 32 * 1024 * 1024
# What one pinned hit costs in the page cache (its slot in the id list and three binary64
# values; the record id string is the projection's), and an ordering's own objects.
HIT_BYTES = 40
ORDERING_BYTES = 700


@dataclass(frozen=True)
class Ordering:
    hits: Hits
    candidate_count: int
    semantic: bool = False

    @property
    def nbytes(self) -> int:
        return ORDERING_BYTES + HIT_BYTES * len(self.hits)


class PageCache:
    """Pinned orderings of recent searches by their ordered-ids digest (a removal surface),
    bounded by bytes, least recently used dropped first. Thread-safe."""

    def __init__(self, max_bytes: int = DEFAULT_PAGE_CACHE_BYTES) -> None:
        self._entries: OrderedDict[str, Ordering] = OrderedDict()
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: str, ordering: Ordering) -> None:
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous.nbytes
            self._entries[key] = ordering
            self._bytes += ordering.nbytes
            while self._bytes > self._max_bytes and len(self._entries) > 1:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.nbytes

    def get(self, key: str) -> Ordering | None:
        with self._lock:
            ordering = self._entries.get(key)
            if ordering is not None:
                self._entries.move_to_end(key)
            return ordering

    def drop_record(self, record_id: str) -> int:
        return self.drop_records(frozenset((record_id,)))

    def drop_records(self, record_ids: frozenset[str] | set[str]) -> int:
        """Drop every ordering that holds one of ``record_ids``; how many were dropped."""
        if not record_ids:
            return 0
        with self._lock:
            stale = [k for k, o in self._entries.items() if any(i in record_ids for i in o.hits.ids)]
            for key in stale:
                self._bytes -= self._entries.pop(key).nbytes
            return len(stale)


def semantic_config_json(embedder: Embedder) -> bytes:
    """The semantic channel's part of the profile config: the model's (id and checksums) and
    the vector index's, in canonical JSON."""
    return canonicalize({**embedder.config(), **VectorIndex.config()})


def profile_config_digest(projection: ScopeProjection, semantic_json: bytes | None = None) -> str:
    """The digest of :func:`search_service.ranking.profile_config` for the channels used:
    the lexical engine's config and, when the semantic channel ranked,
    :func:`semantic_config_json`."""
    return _config_digest(projection.profile_config_json(), semantic_json)


@functools.lru_cache(maxsize=64)
def _config_digest(lexical_json: bytes, semantic_json: bytes | None) -> str:
    """Per distinct engine config (a handful: one per language and channel set), not per search."""
    semantic = None if semantic_json is None else json.loads(semantic_json)
    return digest("rank", profile_config(json.loads(lexical_json), semantic))


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    """Ranking and page building run in ``pool`` (CPU work off the event loop) while the
    scope's projection lock is held."""

    def __init__(self, projections: Projections, codec: CursorCodec, *, pinned_hits: int = DEFAULT_PINNED_HITS,
                 pool: Executor | None = None, page_cache_bytes: int = DEFAULT_PAGE_CACHE_BYTES,
                 replica_id: str = "", embedder: Embedder | None = None,
                 semantic_off: str = SEMANTIC_DISABLED) -> None:
        """``embedder``: the semantic channel's model (the same one ``projections`` embeds
        records with); None: the channel is off, ``semantic_off`` says why (a constant)."""
        # Named in coverage receipts; the server sets it once the port is bound.
        self.replica_id = replica_id
        self._projections = projections
        self._codec = codec
        self._pages = PageCache(page_cache_bytes)
        self._pinned_hits = pinned_hits
        self._pool = pool
        self._embedder = embedder
        self._semantic_off = semantic_off
        self._semantic_json = None if embedder is None else semantic_config_json(embedder)
        self.surfaces = tuple(sorted((*SURFACES, SEMANTIC_SURFACE) if embedder is not None else SURFACES))

    @rpc_boundary
    async def Search(self, request: search_pb2.SearchRequest, context: grpc.aio.ServicerContext) -> search_pb2.SearchResponse:
        args = json.loads(request.arguments_json)
        caller = request.caller
        tenant, workspace = caller.scope.tenant, caller.scope.workspace
        required = args["capability_policy"]["minimum_channels"] == "lexical_and_semantic"
        if required and self._embedder is None:
            raise EngramError(Code.RANKING_UNAVAILABLE)  # never a silent lexical fallback
        if request.policy_json:
            # Read from storage for this very call by the gateway (one round trip, not two).
            view = ScopeView.of(request.policy_json, request.head_cursor)
        else:
            view = await self._projections.policy(tenant, workspace)
        remaining = context.time_remaining()
        # A scope still (re)building is waited for until just before the caller's deadline,
        # then PROJECTION_STALE: never a partial answer.
        wait = None if remaining is None else max(0.0, remaining - DEADLINE_MARGIN_SECONDS)
        projection = await self._projections.current(tenant, workspace, view.policy.language,
                                                     view.head, wait_seconds=wait)
        async with projection.lock:
            if required and projection.vectors is None:
                raise EngramError(Code.RANKING_UNAVAILABLE)
            value = await asyncio.get_running_loop().run_in_executor(
                self._pool, self._answer, projection, args, tenant, workspace, caller.principal,
                view.policy.redaction_allowlist)
        return search_pb2.SearchResponse(value_json=value)

    def _semantic_for(self, projection: ScopeProjection) -> Embedder | None:
        """The model when the semantic channel is healthy for this scope, else None."""
        return self._embedder if projection.vectors is not None else None

    def _answer(self, projection: ScopeProjection, args: dict[str, Any], tenant: str, workspace: str, principal: str,
                allowlist: list[str] | None) -> bytes:
        request_digest = digest("rank", {"request": {k: args[k] for k in sorted(args) if k != "page_cursor"}})
        scope_d = self._codec.scope_digest(tenant, workspace)
        principal_d = self._codec.principal_digest(tenant, workspace, principal)
        now = now_ms()
        if "page_cursor" in args:
            state = self._codec.decode(args["page_cursor"], now_ms=now)
            if (state.request_digest, state.scope_digest, state.principal_digest) != (request_digest, scope_d, principal_d):
                raise EngramError(Code.STALE_PAGE)
            system_as_of, valid_as_of, offset = int(state.system_as_of), state.valid_as_of, state.offset
            ordering = self._ordering_at(projection, args["query"], system_as_of, valid_as_of, state.ordered_ids_digest)
            ids_digest = state.ordered_ids_digest
        else:
            system_as_of, valid_as_of, offset = projection.cursor, now, 0
            ordering = self._rank(projection, args["query"], system_as_of, valid_as_of)
            ids_digest = _ids_digest(ordering)
            self._pages.put(ids_digest, ordering)
        value = self._page(projection, args, ordering, offset, allowlist, request_digest, scope_d,
                           principal_d, system_as_of, valid_as_of, ids_digest, now)
        return canonical_with_digest("response", value, "response_digest")

    def _rank(self, projection: ScopeProjection, query: str, system_as_of: int, valid_as_of: int) -> Ordering:
        return rank_scope(projection, query, self._semantic_for(projection), system_as_of, valid_as_of,
                          self._pinned_hits)

    def _ordering_at(self, projection: ScopeProjection, query: str, system_as_of: int, valid_as_of: int,
                     ids_digest: str) -> Ordering:
        ordering = self._pages.get(ids_digest)
        if ordering is None:
            # Another replica pinned it, or it was dropped: rank again at the pin.
            ordering = self._rank(projection, query, system_as_of, valid_as_of)
            if _ids_digest(ordering) != ids_digest:
                raise EngramError(Code.STALE_PAGE)
            self._pages.put(ids_digest, ordering)
        if any(record_id not in projection.records for record_id in ordering.hits.ids):
            # A record of the pinned ordered set left accepted_current.
            raise EngramError(Code.STALE_PAGE)
        return ordering

    def _page(self, projection: ScopeProjection, args: dict[str, Any], ordering: Ordering, offset: int,
              allowlist: list[str] | None, request_digest: str, scope_d: str, principal_d: str, system_as_of: int, valid_as_of: int,
              ids_digest: str, now: int) -> dict[str, Any]:
        """The page's output value without ``response_digest`` (the caller appends it)."""
        limit = args["limit"]
        window = ordering.hits[offset : offset + limit]
        # Each packet is serialised once: measured by the budget, then written verbatim.
        packets = [projection.packet_part(hit.record_id, allowlist).fill(hit.score, hit.rank) for hit in window]
        cursor = str(projection.cursor)
        channels = [{"channel": "lexical", "index_cursor": cursor}]
        fields: dict[str, Any] = {}
        if ordering.semantic:
            channels.append({"channel": "semantic", "index_cursor": cursor})
        else:
            # Lexical only, and why: the receipt never hides a missing channel.
            # (A scope's own fault is only ever set while the model is loaded.)
            reason = projection.semantic_fault or self._semantic_off
            fields["unavailable_channels"] = [{"channel": "semantic", "reason": reason}]
        receipt = with_digest(
            "rank",
            {
                "request_digest": request_digest,
                "profile": PROFILE,
                "profile_config_digest": profile_config_digest(projection, self._semantic_json if ordering.semantic else None),
                "channels": channels,
                **fields,
                "system_as_of": str(system_as_of),
                "valid_as_of": valid_as_of,
                "candidate_count": ordering.candidate_count,
                "ordered_ids_digest": ids_digest,
                "issued_at": format_instant(now),
            },
            "receipt_digest",
        )
        skeleton = {
            "records": [],
            "rank_receipt": receipt,
            "response_digest": DIGEST_PLACEHOLDER,
            CURSOR_FIELD: cursor_placeholder(MAX_TOKEN_LENGTH),
        }
        more_hits = offset + limit < len(ordering.hits)
        fit = fit_packets(skeleton, packets, args["max_packet_bytes"], limit, more_hits)
        value: dict[str, Any] = {"records": fit.included, "rank_receipt": receipt}
        if fit.has_more:
            value[CURSOR_FIELD] = self._codec.encode(
                CursorState(
                    request_digest=request_digest,
                    scope_digest=scope_d,
                    principal_digest=principal_d,
                    system_as_of=str(system_as_of),
                    valid_as_of=valid_as_of,
                    offset=offset + len(fit.included),
                    ordered_ids_digest=ids_digest,
                    issued_at_ms=now,
                )
            )
        return value

    @rpc_boundary
    async def Invalidate(self, request: search_pb2.InvalidateRequest, context: grpc.aio.ServicerContext) -> search_pb2.InvalidateResponse:
        if request.whole_scope:
            # The operator's rebuild: the scope's next search builds it again from the journal.
            self._pages.drop_records(self._projections.drop(request.scope.tenant, request.scope.workspace))
            return search_pb2.InvalidateResponse(surfaces=list(self.surfaces), replica_id=self.replica_id)
        projection = self._projections.peek(request.scope.tenant, request.scope.workspace)
        if projection is not None:
            async with projection.lock:
                projection.remove(request.record_id)
        self._pages.drop_record(request.record_id)
        return search_pb2.InvalidateResponse(surfaces=list(self.surfaces), replica_id=self.replica_id)


def rank_scope(projection: ScopeProjection, query: str, embedder: Embedder | None, system_as_of: int,
               valid_as_of: int, depth: int) -> Ordering:
    """The pinned ordering of ``query`` over the scope: the lexical channel, and the semantic
    one when ``embedder`` is given (the channel is healthy for the scope), fused exactly."""
    channels = [Channel.lexical(projection.scores(query))]
    if embedder is not None:
        channels.append(Channel.above(projection.similarities(embedder.embed_query(query)), MIN_SIMILARITY))
    top = top_k(channels, projection.table, valid_as_of, system_as_of, depth)
    return Ordering(top.hits, top.candidates, embedder is not None)


def _ids_digest(ordering: Ordering) -> str:
    return digest("rank", {"ordered_ids": ordering.hits.ids})
