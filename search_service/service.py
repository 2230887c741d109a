"""SearchService: rank the caller's scope at the current pin, budget the packets, sign the
page cursor, issue the rank receipt (SPEC §5 engram_memory_search, §9)."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import grpc

from engram_api.search.v1 import search_pb2, search_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.digests import digest, with_digest
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import rpc_boundary
from engram_core.timefmt import format_instant, now_ms
from search_service.analyzer import DEFAULT_LANGUAGE
from search_service.budget import CURSOR_FIELD, DIGEST_PLACEHOLDER, cursor_placeholder, fit_packets
from search_service.cursors import MAX_TOKEN_LENGTH, CursorCodec, CursorState
from search_service.projection import Projections, ScopeProjection
from search_service.ranking import PROFILE, RankedHit, rank
from engram_core.redaction import project

log = logging.getLogger("engram.search")

PAGE_CACHE_ENTRIES = 256
SURFACES = ("lexical_index", "page_cache")


@dataclass(frozen=True)
class Ordering:
    hits: tuple[RankedHit, ...]
    candidate_count: int


class PageCache:
    """Orderings of recent searches by their ordered-ids digest (a removal surface)."""

    def __init__(self, size: int = PAGE_CACHE_ENTRIES) -> None:
        self._entries: OrderedDict[str, Ordering] = OrderedDict()
        self._size = size

    def put(self, key: str, ordering: Ordering) -> None:
        self._entries[key] = ordering
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def get(self, key: str) -> Ordering | None:
        return self._entries.get(key)

    def drop_record(self, record_id: str) -> int:
        stale = [k for k, o in self._entries.items() if any(h.record_id == record_id for h in o.hits)]
        for key in stale:
            del self._entries[key]
        return len(stale)


def profile_config_digest(projection: ScopeProjection) -> str:
    return digest("rank", {"profile": PROFILE, "lexical": dict(projection.index.profile_config())})


class SearchServicer(search_pb2_grpc.SearchServiceServicer):
    def __init__(self, projections: Projections, codec: CursorCodec) -> None:
        self._projections = projections
        self._codec = codec
        self._pages = PageCache()

    @rpc_boundary
    async def Search(self, request: search_pb2.SearchRequest, context: grpc.aio.ServicerContext) -> search_pb2.SearchResponse:
        args = json.loads(request.arguments_json)
        caller = request.caller
        tenant, workspace = caller.scope.tenant, caller.scope.workspace
        policy = args["capability_policy"]
        if policy["minimum_channels"] == "lexical_and_semantic":
            # No semantic channel is configured yet; never a silent lexical fallback.
            raise EngramError(Code.RANKING_UNAVAILABLE)
        request_digest = digest("rank", {"request": {k: args[k] for k in sorted(args) if k != "page_cursor"}})
        scope_d = self._codec.scope_digest(tenant, workspace)
        principal_d = self._codec.principal_digest(tenant, workspace, caller.principal)
        view = await self._projections.policy(tenant, workspace)
        allowlist = view.policy.get("redaction_allowlist")
        projection = await self._projections.current(tenant, workspace, view.policy.get("language", DEFAULT_LANGUAGE),
                                                     view.head)
        async with projection.lock:
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
        return search_pb2.SearchResponse(value_json=canonicalize(value))

    def _rank(self, projection: ScopeProjection, query: str, system_as_of: int, valid_as_of: int) -> Ordering:
        hits = [
            (doc_id, score)
            for doc_id, score in projection.index.search(query)
            if projection.accepted_at.get(doc_id, system_as_of + 1) <= system_as_of
        ]
        ranked = rank(hits, None, projection.index.metas(), valid_as_of)
        return Ordering(tuple(ranked), len(hits))

    def _ordering_at(self, projection: ScopeProjection, query: str, system_as_of: int, valid_as_of: int,
                     ids_digest: str) -> Ordering:
        ordering = self._pages.get(ids_digest)
        if ordering is None:
            ordering = self._rank(projection, query, system_as_of, valid_as_of)
            if _ids_digest(ordering) != ids_digest:
                raise EngramError(Code.STALE_PAGE)
            self._pages.put(ids_digest, ordering)
        if any(hit.record_id not in projection.records for hit in ordering.hits):
            # A record of the pinned ordered set left accepted_current.
            raise EngramError(Code.STALE_PAGE)
        return ordering

    def _page(self, projection: ScopeProjection, args: dict[str, Any], ordering: Ordering, offset: int,
              allowlist: list[str] | None, request_digest: str, scope_d: str, principal_d: str, system_as_of: int, valid_as_of: int,
              ids_digest: str, now: int) -> dict[str, Any]:
        limit = args["limit"]
        window = ordering.hits[offset : offset + limit]
        packets = [
            {**project(projection.records[hit.record_id], allowlist), "score": hit.score, "rank": hit.rank}
            for hit in window
        ]
        receipt = with_digest(
            "rank",
            {
                "request_digest": request_digest,
                "profile": PROFILE,
                "profile_config_digest": profile_config_digest(projection),
                "channels": [{"channel": "lexical", "index_cursor": str(projection.cursor)}],
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
        value["response_digest"] = digest("response", value)
        return value

    @rpc_boundary
    async def Invalidate(self, request: search_pb2.InvalidateRequest, context: grpc.aio.ServicerContext) -> search_pb2.InvalidateResponse:
        projection = self._projections.peek(request.scope.tenant, request.scope.workspace)
        if projection is not None:
            async with projection.lock:
                projection.remove(request.record_id)
        self._pages.drop_record(request.record_id)
        return search_pb2.InvalidateResponse(surfaces=list(SURFACES))


def _ids_digest(ordering: Ordering) -> str:
    return digest("rank", {"ordered_ids": [hit.record_id for hit in ordering.hits]})
