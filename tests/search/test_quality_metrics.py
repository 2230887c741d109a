"""The retrieval-quality metrics of bench/quality_bench.py (bench/common.py) on hand-computed
cases, and the bench's SPEC §5 text split. Needs neither the data packages nor a stack."""

import math

import pytest

from bench.common import mrr, ndcg_at_k, recall_at_k
from bench.quality_bench import MAX_COMPONENTS, BoundsError, fit_components, split_text

RANKING = ["a", "b", "c", "d"]
RELEVANT = {"b", "d"}


def test_recall_is_the_fraction_of_relevant_documents_in_the_top_k():
    assert recall_at_k(RANKING, RELEVANT, 1) == 0.0
    assert recall_at_k(RANKING, RELEVANT, 2) == 0.5
    assert recall_at_k(RANKING, RELEVANT, 3) == 0.5
    assert recall_at_k(RANKING, RELEVANT, 4) == 1.0
    assert recall_at_k(RANKING, RELEVANT, 100) == 1.0  # a list shorter than k
    assert recall_at_k(["x", "y"], {"x", "y", "z"}, 2) == pytest.approx(2 / 3)
    assert recall_at_k([], {"a"}, 10) == 0.0


def test_ndcg_by_hand():
    # relevant at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5); ideal = 1/log2(2) + 1/log2(3)
    assert ndcg_at_k(RANKING, RELEVANT, 4) == pytest.approx((0.6309298 + 0.4306766) / 1.6309298, abs=1e-6)
    assert ndcg_at_k(RANKING, RELEVANT, 4) == pytest.approx(0.6509209, abs=1e-6)
    # cut at 2: only rank 2 counts; the ideal still has two relevant documents in its top 2
    assert ndcg_at_k(RANKING, RELEVANT, 2) == pytest.approx(0.6309298 / 1.6309298, abs=1e-6)
    assert ndcg_at_k(RANKING, RELEVANT, 1) == 0.0
    assert ndcg_at_k(["b", "d", "a"], RELEVANT, 10) == 1.0
    # more relevant documents than k: the ideal is k relevant documents, so a full top k is 1
    assert ndcg_at_k(["x", "y"], {"x", "y", "z"}, 2) == 1.0
    # one relevant document at rank 3 of 10: 1/log2(4) = 0.5
    assert ndcg_at_k(["p", "q", "r"], {"r"}, 10) == 0.5
    assert ndcg_at_k([], {"r"}, 10) == 0.0


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_document():
    assert mrr(RANKING, RELEVANT) == 0.5
    assert mrr(["d", "b"], RELEVANT) == 1.0
    assert mrr(["p", "q", "r"], {"r"}) == pytest.approx(1 / 3)
    assert mrr(["p", "q"], {"r"}) == 0.0
    assert mrr([], {"r"}) == 0.0


def test_a_repeated_document_counts_once_and_the_next_ones_move_up():
    ranking = ["a", "a", "b", "c"]
    assert recall_at_k(ranking, {"b"}, 2) == 1.0
    assert ndcg_at_k(ranking, {"a", "b"}, 2) == 1.0
    assert mrr(["x", "x", "b"], {"b"}) == 0.5


def test_a_query_without_relevant_documents_is_refused():
    for metric in (lambda: recall_at_k(RANKING, set(), 5), lambda: ndcg_at_k(RANKING, set(), 10),
                   lambda: mrr(RANKING, set())):
        with pytest.raises(ValueError):
            metric()


def test_means_over_queries_match_the_hand_figures():
    queries = [(RANKING, RELEVANT), (["r", "p"], {"r"})]
    assert sum(mrr(r, rel) for r, rel in queries) / 2 == 0.75
    assert sum(recall_at_k(r, rel, 2) for r, rel in queries) / 2 == 0.75
    expected = (1 / math.log2(3) / (1 + 1 / math.log2(3)) + 1.0) / 2
    assert sum(ndcg_at_k(r, rel, 2) for r, rel in queries) / 2 == pytest.approx(expected)


def test_split_text_keeps_the_byte_bound_and_the_words():
    text = " ".join(["wort", "größe", "日本語"] * 20)
    pieces = split_text(text, limit=50)
    assert all(0 < len(p.encode("utf-8")) <= 50 for p in pieces)
    assert " ".join(pieces).split() == text.split()
    # no whitespace: cut between characters, never inside one
    pieces = split_text("ü" * 40, limit=25)
    assert [len(p.encode("utf-8")) for p in pieces] == [24, 24, 24, 8]
    assert "".join(pieces) == "ü" * 40
    assert split_text("short") == ["short"]


def test_fit_components_puts_the_overflow_in_context_components_after_its_part():
    long_text = "x " * 40_000  # 80,000 bytes: two components
    components, split = fit_components([("decision", "primary"), ("evidence", long_text), ("context", "tail")])
    assert split == 1
    assert [kind for kind, _ in components] == ["decision", "evidence", "context", "context"]
    assert all(len(text.encode("utf-8")) <= 65_536 for _, text in components)
    assert components[-1] == ("context", "tail")
    with pytest.raises(BoundsError):
        fit_components([("context", "t")] * (MAX_COMPONENTS + 1))
