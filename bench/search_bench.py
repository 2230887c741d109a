"""Benchmark of the in-memory search library (tokenizer, BM25 index, ranking, page budget).

    python bench/search_bench.py --n 1000 --n 10000 --n 100000 --queries 500

Builds one scope projection of N synthetic records per size, runs M queries through the search
service's own page code (``SearchServicer._answer``: lexical scores over the scope, the exact top
of the pinned list, its ordered-ids digest and pin, redaction, packets, the rank receipt, the
page budget and the response digest), and prints latency percentiles, throughput and the
projection's memory cost. No gRPC, no I/O: this measures what the search service does for a
search once it holds the scope's lock.

``--semantic`` adds the semantic channel as the service runs it (query embedded, exact
best-window cosine over the scope's vector matrix, RRF fusion of both channels). The first
``--embed-distinct`` records are embedded for real (their rate is printed as the embedding
throughput); the rest reuse those vectors in turn, each moved by a little noise (so that they
do not tie exactly), which costs a search as much as distinct texts would.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
import tracemalloc

import numpy as np
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BENCH_PRINCIPAL, BENCH_PURPOSE, machine  # noqa: E402
from engram_core.canonical import canonicalize  # noqa: E402
from engram_core.schemas.validate import with_defaults  # noqa: E402
from engram_hostkit.examples import make_search_args  # noqa: E402
from search_service.cursors import CursorCodec  # noqa: E402
from search_service.projection import ScopeProjection  # noqa: E402
from search_service.embedding import Embedder  # noqa: E402
from search_service.semantic import VectorIndex, record_text  # noqa: E402
from search_service.service import DEFAULT_PINNED_HITS, SearchServicer  # noqa: E402

DAY_MS = 86_400_000
# The service ranks at its clock's now: the records' valid times lie before it.
NOW_MS = int(time.time() * 1000)
SEARCH = "engram_memory_search"
TENANT, WORKSPACE = "tenant:bench", "workspace:bench"
PAGE_LIMIT = 10
MAX_PACKET_BYTES = 65_536


def make_vocabulary(rng: random.Random, size: int) -> tuple[list[str], list[float]]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(3, 10))) for _ in range(size)})
    rng.shuffle(words)
    weights = [1.0 / (rank + 1) ** 1.07 for rank in range(len(words))]
    cumulative, total = [], 0.0
    for weight in weights:
        total += weight
        cumulative.append(total)
    return words, cumulative


def make_record(rng: random.Random, i: int, words: list[str], cum: list[float]) -> dict:
    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(lo, hi)))

    kinds = ("decision", "evidence", "context")
    components = [
        {"component_id": f"c{j}", "kind": rng.choice(kinds), "text": text(8, 60),
         "citation_ids": ["k0"]}
        for j in range(rng.randint(1, 4))
    ]
    citations = [
        {"citation_id": f"k{j}", "source_ref": f"doc://corpus/{rng.choice(words)}/{i}-{j}",
         "locator": {"scheme": "uri", "value": f"doc://corpus/{i}/{j}"},
         "content_digest": "sha256:" + "0" * 64}
        for j in range(rng.randint(1, 3))
    ]
    t = NOW_MS - rng.randint(0, 400) * DAY_MS
    return {
        "record_id": f"mem_{i:052d}",
        "record_digest": "sha256:" + f"{i:064x}",
        "schema_version": 2,
        "valid_time": {"t": t},
        "components": components,
        "primary_component_id": "c0",
        "primary_event": {"at": t, "type_ref": "event", "citation_id": "k0"},
        "citations": citations,
        "trust": "asserted",
        "recorded_at": "2027-01-15T08:00:00.000Z",
        "retention": {"derivative_rule": "make-ineligible"},
    }


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build_index(texts: list[bytes], windows: list | None = None) -> ScopeProjection:
    """As the service builds a scope: each record parsed from its JSON, the JSON kept (and
    with ``windows``, each record's vectors, reused in turn)."""
    projection = ScopeProjection(vectors=None if windows is None else VectorIndex())
    noise = np.random.default_rng(len(texts))
    for i, raw in enumerate(texts):
        own = None
        if windows is not None:
            # A reused record's vectors, moved a little (distinct texts do not tie exactly).
            own = windows[i % len(windows)] + noise.normal(0.0, 0.01, windows[i % len(windows)].shape).astype(np.float32)
            own /= np.linalg.norm(own, axis=1, keepdims=True)
        projection.add(json.loads(raw), cursor=1, raw=raw, windows=own)
    projection.cursor = 1  # caught up with its journal (what the service ranks as of)
    return projection


def search_page(servicer: SearchServicer, projection: ScopeProjection, query: str) -> tuple[float, bytes]:
    """One query through the service's own page code (``SearchServicer._answer``, as its Search
    RPC runs it in the pool); returns (lexical seconds, the output value's canonical JSON)."""
    t0 = time.perf_counter()
    projection.scores(query)  # the lexical channel alone, timed apart from the page
    t1 = time.perf_counter()
    args = with_defaults(SEARCH, make_search_args(query, BENCH_PURPOSE, limit=PAGE_LIMIT, max_packet_bytes=MAX_PACKET_BYTES))
    value = servicer._answer(projection, args, TENANT, WORKSPACE, BENCH_PRINCIPAL, None)
    return t1 - t0, value


def candidates(value: bytes) -> int:
    return int(json.loads(value)["rank_receipt"]["candidate_count"])


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run(n: int, queries: int, seed: int, trace: bool, freeze: bool, embedder: Embedder | None = None,
        embed_distinct: int = 2000) -> dict:
    rng = random.Random(seed)
    words, cum = make_vocabulary(rng, 20_000)
    # The records' JSON exists before the build (storage's replies): RSS growth is the index.
    records = [make_record(rng, i, words, cum) for i in range(n)]
    texts = [canonicalize(record) for record in records]
    query_texts = [" ".join(rng.choices(words, cum_weights=cum, k=rng.randint(2, 5)))
                   for _ in range(queries)]
    windows, embed_rate = None, None
    if embedder is not None:
        sample = [record_text(record) for record in records[:embed_distinct]]
        t0 = time.perf_counter()
        windows = embedder.embed_many(sample)
        embed_rate = len(sample) / (time.perf_counter() - t0)
    del records
    gc.collect()
    rss_before = rss_bytes()
    t0 = time.perf_counter()
    index = build_index(texts, windows)
    build_s = time.perf_counter() - t0
    gc.collect()
    rss_delta = rss_bytes() - rss_before
    traced = None
    if trace:
        del index
        gc.collect()
        tracemalloc.start()
        index = build_index(texts, windows)
        traced = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    if freeze:
        gc.freeze()  # what a service can do after (re)building its projections
    servicer = SearchServicer(None, CursorCodec(b"bench cursor key: 32 bytes long."),  # type: ignore[arg-type]
                              embedder=embedder)
    for query in query_texts[: min(20, queries)]:  # warm-up
        search_page(servicer, index, query)
    totals, lexicals, values = [], [], []
    t_all = time.perf_counter()
    for query in query_texts:
        start = time.perf_counter()
        lexical_s, value = search_page(servicer, index, query)
        totals.append(time.perf_counter() - start - lexical_s)
        lexicals.append(lexical_s)
        values.append(value)
    wall = time.perf_counter() - t_all
    hit_counts = [candidates(value) for value in values]
    totals.sort()
    lexicals.sort()
    return {
        "python": platform.python_version(),
        "n": n,
        "gc_freeze": freeze,
        "queries": queries,
        "build_s": round(build_s, 3),
        "docs_per_s": round(n / build_s),
        "rss_delta_mb": round(rss_delta / 2**20, 1),
        "rss_per_record_b": round(rss_delta / n),
        "text_per_record_b": round(sum(len(t) for t in texts) / n),
        "index_buffers_per_record_b": round((index.index.nbytes() + index.table.nbytes()) / n),
        "semantic": embedder is not None,
        "vector_bytes_per_record": None if index.vectors is None else round(index.vectors.nbytes() / n),
        "vector_rows": None if index.vectors is None else index.vectors.rows,
        "embed_records_per_s": None if embed_rate is None else round(embed_rate, 1),
        "traced_mb": None if traced is None else round(traced / 2**20, 1),
        "median_hits": statistics.median(hit_counts),
        "page_ms": {q: round(percentile(totals, p) * 1000, 3)
                    for q, p in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))},
        "lexical_ms": {q: round(percentile(lexicals, p) * 1000, 3)
                       for q, p in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))},
        "qps": round(queries / wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="records per scope (repeatable)")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also rebuild under tracemalloc to report traced index memory")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() after building, so full collections skip the index")
    parser.add_argument("--json", action="store_true", help="one JSON line per size")
    parser.add_argument("--semantic", action="store_true", help="both channels, as the service runs them")
    parser.add_argument("--embed-distinct", type=int, default=2000,
                        help="records embedded for real (the others reuse their vectors)")
    parser.add_argument("--embedding-threads", type=int, default=2)
    args = parser.parse_args(argv)
    embedder = Embedder.load(args.embedding_threads) if args.semantic else None
    if not args.json:
        print(f"# machine: {machine()}")
    for n in args.n or [1000, 10000]:
        result = run(n, args.queries, args.seed, args.tracemalloc, args.gc_freeze, embedder, args.embed_distinct)
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        print(f"python {result['python']}  N={n}  queries={result['queries']}  "
              f"median hits/query={result['median_hits']}  gc.freeze={result['gc_freeze']}  "
              f"channels={'lexical+semantic' if result['semantic'] else 'lexical'}")
        if result["semantic"]:
            print(f"  embedding {result['embed_records_per_s']} records/s ({args.embedding_threads} threads, "
                  f"{min(n, args.embed_distinct)} distinct records); vectors {result['vector_bytes_per_record']} "
                  f"B/record ({result['vector_rows']} window rows, capacity included)")
        print(f"  build {result['build_s']} s ({result['docs_per_s']} docs/s), "
              f"RSS delta {result['rss_delta_mb']} MB ({result['rss_per_record_b']} B/record beside "
              f"{result['text_per_record_b']} B of record JSON; numeric buffers "
              f"{result['index_buffers_per_record_b']} B/record)"
              + ("" if result["traced_mb"] is None else f", traced {result['traced_mb']} MB"))
        page, lex = result["page_ms"], result["lexical_ms"]
        print(f"  page (SearchServicer._answer: score, top-{DEFAULT_PINNED_HITS}, pin, {PAGE_LIMIT} packets, receipt, digests) ms p50 {page['p50']} p95 {page['p95']} "
              f"p99 {page['p99']}; {result['qps']} queries/s")
        print(f"  lexical search alone ms p50 {lex['p50']} p95 {lex['p95']} p99 {lex['p99']}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
