import math
import random

import numpy as np
import pytest

from search_service.analyzer import Analyzer
from search_service.doctable import DocTable
from search_service.lexical import (
    COPY_WEIGHTS,
    FIELD_WEIGHTS,
    FIELDS,
    LEXICAL_PROFILE_CONFIG,
    Index,
    LexicalIndex,
    fields_of,
)
from search_service.ranking import DocMeta

from .helpers import record


def meta(doc_id: str) -> DocMeta:
    return DocMeta(record_id=doc_id, valid_from_ms=0)


class Scope:
    """A table and a lexical index over it, addressed by doc id (what the projection does)."""

    def __init__(self, language: str = "en", **options: int) -> None:
        self.table = DocTable()
        self.index = LexicalIndex(language, **options)
        self.fields: dict[str, dict[str, str]] = {}

    def __len__(self) -> int:
        assert len(self.index) == len(self.table)
        return len(self.index)

    def add(self, doc_id: str, fields: dict[str, str]) -> None:
        self.remove(doc_id)
        self.index.add(self.table.add(meta(doc_id), 0), fields)
        self.fields[doc_id] = fields

    def remove(self, doc_id: str) -> bool:
        slot = self.table.remove(doc_id)
        return slot is not None and self.index.remove(slot, self.fields.pop(doc_id))

    def compact(self) -> None:
        self.index.remap(self.table.compact(), self.table.size)

    def search(self, query: str) -> list[tuple[str, float]]:
        """Live matches by score desc, then doc id."""
        scores = self.index.scores(query, self.table.size)
        alive = self.table.alive
        hits = [(self.table.ids[s], float(scores[s])) for s in np.flatnonzero(scores).tolist() if alive[s]]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits


def build(docs: dict[str, dict[str, str]], language: str = "en") -> Scope:
    scope = Scope(language)
    for doc_id, fields in docs.items():
        scope.add(doc_id, fields)
    return scope


def reference_scores(docs: dict[str, dict[str, str]], query: str, language: str = "en") -> dict[str, float]:
    """BM25 over weighted fields in an exact and a stemmed copy, written straight from the
    formula in SPEC §9 / docs/ranking.md (brute force: every document, every field)."""
    analyzer = Analyzer(language)
    n = len(docs)
    exact = {d: {f: analyzer.exact(fs.get(f, "")) for f in FIELDS} for d, fs in docs.items()}
    copies = {"exact": exact, "stemmed": {d: {f: analyzer.stemmed(t) for f, t in fs.items()} for d, fs in exact.items()}}
    query_exact = analyzer.exact(query)
    query_copies = {"exact": query_exact, "stemmed": analyzer.stemmed(query_exact)}
    scores: dict[str, float] = {}
    for copy, tokens in copies.items():
        avg = {f: sum(len(tokens[d][f]) for d in docs) / n for f in FIELDS}
        for term in query_copies[copy]:
            df = sum(1 for d in docs if any(term in tokens[d][f] for f in FIELDS))
            if df == 0:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for d in docs:
                for f in FIELDS:
                    tf = tokens[d][f].count(term)
                    if tf == 0:
                        continue
                    norm = tf + 1.2 * (1 - 0.75 + 0.75 * len(tokens[d][f]) / avg[f])
                    scores[d] = scores.get(d, 0.0) + idf * tf * 2.2 / norm * FIELD_WEIGHTS[f] * COPY_WEIGHTS[copy]
    return scores


def test_constants():
    assert FIELDS == ("primary", "decision", "evidence", "context", "citations")
    assert dict(FIELD_WEIGHTS) == {
        "primary": 3.0, "decision": 2.0, "evidence": 1.5, "context": 1.0, "citations": 0.5,
    }
    assert LEXICAL_PROFILE_CONFIG["k1"] == 1.2
    assert LEXICAL_PROFILE_CONFIG["b"] == 0.75
    assert LEXICAL_PROFILE_CONFIG["engine"] == "engram-bm25f/np-3"
    assert dict(COPY_WEIGHTS) == {"exact": 1.0, "stemmed": 1.0}
    assert LEXICAL_PROFILE_CONFIG["analyzer"]["language"] == "en"
    assert LexicalIndex("de").profile_config()["analyzer"]["language"] == "de"
    assert LexicalIndex().profile_config() == LEXICAL_PROFILE_CONFIG
    assert isinstance(LexicalIndex(), Index)  # structural: the protocol is satisfiable


def test_bm25_hand_computation():
    # Language none (no stemmed copy). N = 2; "banana" is in one doc (df = 1): idf = ln 2.
    # doc a primary has 2 tokens, avg primary length 1.5:
    # tf part = 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2 / 1.5)) = 2.2 / 2.5 = 0.88; weight 3.
    index = build({"a": {"primary": "apple banana"}, "b": {"primary": "apple"}}, "none")
    assert index.search("banana") == [("a", pytest.approx(0.88 * 3.0 * math.log(2), rel=1e-12))]
    # "apple": df = 2, idf = ln(1 + 0.5 / 2.5) = ln 1.2. doc b: 1 token -> 2.2 / (1 + 1.2 * 0.75)
    hits = dict(index.search("apple"))
    assert hits["b"] == pytest.approx(math.log(1.2) * 3.0 * 2.2 / 1.9, rel=1e-12)
    assert hits["a"] == pytest.approx(math.log(1.2) * 3.0 * 0.88, rel=1e-12)
    # en: the same words are their own stems, so the stemmed copy doubles every score.
    stemmed = build({"a": {"primary": "apple banana"}, "b": {"primary": "apple"}})
    assert dict(stemmed.search("banana"))["a"] == pytest.approx(2 * 0.88 * 3.0 * math.log(2), rel=1e-12)


def test_stemmed_copy_matches_other_forms_and_exact_form_ranks_first():
    index = build({"exact": {"primary": "running shoes"}, "form": {"primary": "runs daily"},
                   "none": {"primary": "walking shoes"}})
    hits = index.search("running")
    assert [doc for doc, _ in hits] == ["exact", "form"]  # "runs" shares the stem "run"
    assert build({"form": {"primary": "runs daily"}}, "none").search("running") == []


def test_stop_words_are_not_indexed_or_searched():
    index = build({"a": {"primary": "the plan for the harbour"}, "b": {"primary": "harbour"}})
    assert index.search("the for") == []
    assert [doc for doc, _ in index.search("the harbour")] == ["b", "a"]  # b is shorter
    german = build({"a": {"primary": "der Plan und die Häuser"}}, "de")
    assert german.search("und die") == []
    assert [doc for doc, _ in german.search("Haus")] == ["a"]  # häuser -> haus (Snowball German)
    assert [doc for doc, _ in build({"a": {"primary": "the plan"}}, "none").search("the")] == ["a"]


def test_matches_brute_force_on_random_corpora():
    """The index scores every document exactly like the SPEC formula, scored brute force."""
    rng = random.Random(11)
    words = ["cache", "caches", "caching", "deploy", "deployed", "deploys", "the", "of", "ml", "kg", "x",
             "harbour", "harbours", "runs", "running", "ran", "der", "die", "häuser", "haus", "laufen",
             "läuft", "straße", "日本", "é", "v2", "42"]
    for language in ("en", "de", "none"):
        for _ in range(15):
            docs = {f"d{i}": {f: " ".join(rng.choice(words) for _ in range(rng.randint(0, 9)))
                              for f in FIELDS if rng.random() < 0.6} for i in range(rng.randint(1, 30))}
            index = build(docs, language)
            if rng.random() < 0.5:
                index.index.freeze()  # the compact tier scores the same
            for _ in range(6):
                query = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
                expected = reference_scores(docs, query, language)
                got = index.search(query)
                assert dict(got).keys() == expected.keys()
                for doc_id, score in got:
                    assert score == pytest.approx(expected[doc_id], rel=1e-12)
                assert got == sorted(got, key=lambda h: (-h[1], h[0]))


def test_matches_reference_on_a_small_corpus():
    docs = {
        "d1": {"primary": "the cache eviction policy uses lru", "evidence": "benchmark lru lru",
               "citations": "doc://cache/lru"},
        "d2": {"primary": "deploy with kubernetes", "context": "cache warmup before deploy"},
        "d3": {"decision": "choose redis as cache", "context": "memcached was slower",
               "citations": "doc://redis"},
        "d4": {"primary": "unrelated note about lunch"},
    }
    index = build(docs)
    for query in ("cache lru", "deploy cache redis", "lunch lunch", "nothing matches here"):
        expected = reference_scores(docs, query)
        got = dict(index.search(query))
        assert got.keys() == expected.keys()
        for doc_id, score in expected.items():
            assert got[doc_id] == pytest.approx(score, rel=1e-12)


def test_field_weights_matter():
    index = build({"p": {"primary": "zebra"}, "c": {"citations": "zebra"},
                   "x": {"primary": "other", "citations": "other"}})
    hits = dict(index.search("zebra"))
    # same tf, same length, same average length in both fields: only the weight differs
    assert hits["p"] / hits["c"] == pytest.approx(3.0 / 0.5, rel=1e-12)
    assert index.search("zebra")[0][0] == "p"


def test_query_term_frequency_counts():
    index = build({"a": {"primary": "zebra crossing"}, "b": {"primary": "crossing"}})
    single = dict(index.search("zebra"))["a"]
    assert dict(index.search("zebra zebra"))["a"] == pytest.approx(2 * single, rel=1e-15)


def test_order_and_no_truncation():
    index = build({f"d{i:04d}": {"primary": "common term " + "pad " * (i % 7)} for i in range(700)})
    hits = index.search("common")
    assert len(hits) == 700
    assert hits == sorted(hits, key=lambda h: (-h[1], h[0]))
    assert all(score > 0 and math.isfinite(score) for _, score in hits)


def test_empty_cases():
    assert Scope().search("anything") == []
    index = build({"a": {"primary": "something"}})
    assert index.search("") == []
    assert index.search("a b the of !!") == []  # only dropped tokens and stop words


@pytest.mark.parametrize("freeze_min_pairs", [1, 5, 64, 1 << 16])
def test_add_remove_keep_stats_exact(freeze_min_pairs: int):
    """Any sequence of adds, removes and compactions, with the tail merged into the frozen
    tier at any point, scores bit for bit like a fresh build of the survivors."""
    rng = random.Random(7)
    vocab = [f"w{i:03d}" for i in range(60)] + ["日本", "é", "straße", "running", "runs", "runner"]

    def text() -> str:
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 12)))

    def fields() -> dict[str, str]:
        return {f: text() for f in FIELDS if rng.random() < 0.7}

    live: dict[str, dict[str, str]] = {}
    index = Scope(freeze_min_pairs=freeze_min_pairs)
    for step in range(600):
        doc_id = f"d{rng.randint(0, 80)}"
        if rng.random() < 0.35:
            assert index.remove(doc_id) is (doc_id in live)
            live.pop(doc_id, None)
        else:
            live[doc_id] = fields()
            index.add(doc_id, live[doc_id])  # re-adding replaces
        if step % 97 == 0:
            index.compact()  # renumbering keeps every score
        if step % 50 == 0 or step == 599:
            fresh = build(dict(sorted(live.items())))
            assert len(index) == len(fresh) == len(live)
            for _ in range(5):
                query = " ".join(rng.choice(vocab) for _ in range(3))
                assert index.search(query) == fresh.search(query)  # bit-identical
    for doc_id in list(live):
        index.remove(doc_id)
    assert len(index) == 0
    assert index.search(" ".join(vocab)) == []
    assert index.index.document_frequencies() == 0
    assert index.index._total_lengths == [0] * (2 * len(FIELDS))
    index.compact()
    assert index.index.posting_lists() == 0 and index.table.size == 0 and not index.index._vocab


def test_slots_are_refused_twice_and_removal_is_idempotent():
    index = LexicalIndex()
    index.add(0, {"primary": "hello"})
    assert 0 in index and 1 not in index
    with pytest.raises(ValueError):
        index.add(0, {"primary": "again"})
    assert index.remove(1, {"primary": "hello"}) is False
    assert index.remove(0, {"primary": "hello"}) is True and index.remove(0, {"primary": "hello"}) is False
    assert 0 not in index and len(index) == 0


def test_scores_vector_covers_the_table_size():
    scope = build({f"d{i}": {"primary": "alpha"} for i in range(3000)})  # grows past 1024 slots
    scores = scope.index.scores("alpha", scope.table.size)
    assert scores.shape == (3000,) and scores.dtype == np.float64 and (scores > 0).all()
    assert scope.index.nbytes() > 0


def test_unknown_field_refused():
    with pytest.raises(ValueError):
        LexicalIndex().add(0, {"title": "x"})


def test_fields_of_record():
    rec = record(
        "mem_a",
        "primary decision text",
        kind="decision",
        others=(("decision", "second decision"), ("evidence", "ev one"),
                ("context", "ctx one"), ("evidence", "ev two")),
        sources=("doc://one", "https://two.example/x"),
    )
    assert fields_of(rec) == {
        "primary": "primary decision text",
        "decision": "second decision",  # the primary component is not repeated here
        "evidence": "ev one\nev two",
        "context": "ctx one",
        "citations": "doc://one\nhttps://two.example/x",
    }


def test_fields_of_rejects_broken_records():
    rec = record("mem_a", "text")
    rec["primary_component_id"] = "missing"
    with pytest.raises(ValueError):
        fields_of(rec)
    rec = record("mem_a", "text", others=(("opinion", "x"),))
    with pytest.raises(ValueError):
        fields_of(rec)


@pytest.mark.parametrize("repeat", [1, 255, 256, 65535, 65536])
def test_the_frozen_tier_scores_like_the_tail_at_every_term_frequency(repeat: int):
    """A build's end freezes the tail into compact columns (tf in 1, 2 or 4 bytes as needed):
    the scores stay bit for bit those of the tail and of the formula."""
    docs = {"a": {"primary": " ".join(["tide"] * repeat), "context": "tide gauge"},
            "b": {"primary": "tide tables", "citations": "doc:tides"}, "c": {"primary": "gauge"}}
    tail = build(docs)
    frozen = build(docs)
    frozen.index.freeze()
    assert tail.index._tail_pairs > 0 and frozen.index._tail_pairs == 0 and frozen.index._frozen_pairs > 0
    for query in ("tide", "tide gauge", "tables tides", "gauge gauge"):
        got, expected = dict(frozen.search(query)), reference_scores(docs, query)
        assert frozen.search(query) == tail.search(query) and got.keys() == expected.keys()
        for doc_id, score in expected.items():
            assert got[doc_id] == pytest.approx(score, rel=1e-12)


def test_adds_after_a_freeze_land_in_the_tail_and_merge_later():
    scope = Scope(freeze_min_pairs=8)
    for i in range(40):
        scope.add(f"d{i}", {"primary": f"alpha beta{i % 7} gamma{i}"})
        assert scope.search("alpha")[0][1] > 0
    index = scope.index
    assert index._frozen_pairs > 0  # merged at least once on the way
    fresh = build({f"d{i}": {"primary": f"alpha beta{i % 7} gamma{i}"} for i in range(40)})
    for query in ("alpha", "beta3 gamma17", "gamma39"):
        assert scope.search(query) == fresh.search(query)


def test_the_stemmed_copy_is_read_from_the_exact_postings():
    """Only the exact copy stores postings (one list per field and exact term); a stem's tf in
    a document is the sum of its forms' exact tfs, wherever (tail or frozen) each one sits."""
    docs = {"a": {"primary": "running runs run", "context": "runner"},
            "b": {"primary": "runs"},
            "c": {"primary": "ran walking", "decision": "walks walked"}}
    scope = build(docs)
    exact_lists = {(f, token) for fields in docs.values() for f, text in fields.items()
                   for token in Analyzer("en").exact(text)}
    assert scope.index.posting_lists() == len(exact_lists)
    scope.index.freeze()
    scope.add("d", {"primary": "run running"})  # tail forms of a stem whose others are frozen
    docs["d"] = {"primary": "run running"}
    for query in ("run", "running", "walk", "runs walked", "runner"):
        got, expected = dict(scope.search(query)), reference_scores(docs, query)
        assert got.keys() == expected.keys(), query
        for doc_id, score in expected.items():
            assert got[doc_id] == pytest.approx(score, rel=1e-12), (query, doc_id)
    assert scope.search("run") == build(docs).search("run")  # bit for bit a fresh build's
