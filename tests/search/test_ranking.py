import math

import pytest

from search_service.lexical import LEXICAL_PROFILE_CONFIG
from search_service.projection import ScopeProjection
from search_service.ranking import (
    HALF_LIFE_MS,
    PROFILE,
    DocMeta,
    RankedHit,
    is_eligible,
    profile_config,
    rank,
    recency,
    round_score,
)
from search_service.topk import Channel, top_k

from .helpers import DAY_MS, NOW_MS, record

NOW = NOW_MS


def metas_for(*ids: str, valid_from_ms: int = NOW) -> dict[str, DocMeta]:
    return {i: DocMeta(record_id=i, valid_from_ms=valid_from_ms) for i in ids}


def by_id(hits: list[RankedHit]) -> dict[str, RankedHit]:
    return {h.record_id: h for h in hits}


def test_single_channel_rrf_normalised():
    hits = rank([("a", 9.0), ("b", 5.0), ("c", 1.0)], None, metas_for("a", "b", "c"), NOW)
    assert [h.record_id for h in hits] == ["a", "b", "c"]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].fused == 1.0
    assert hits[1].fused == round_score(61 / 62)
    assert hits[2].fused == round_score(61 / 63)
    assert all(h.recency == 1.0 for h in hits)
    assert hits[0].score == 1.0
    assert hits[1].score == round_score(0.95 * round_score(61 / 62) + 0.05)


def test_two_channels_rrf():
    metas = metas_for("a", "b", "c")
    hits = by_id(rank([("a", 3.0), ("b", 2.0)], [("a", 0.9), ("c", 0.8)], metas, NOW))
    assert hits["a"].fused == 1.0  # first in both channels
    assert hits["b"].fused == round_score((1 / 62) * 61 / 2)
    assert hits["c"].fused == round_score((1 / 62) * 61 / 2)
    # a used semantic channel counts in the normalisation even when it has no hits
    alone = rank([("a", 3.0)], [], metas, NOW)
    assert alone[0].fused == 0.5


def test_channel_ties_by_record_id():
    hits = rank([("b", 2.0), ("a", 2.0)], None, metas_for("a", "b"), NOW)
    assert [(h.record_id, h.fused) for h in hits] == [("a", 1.0), ("b", round_score(61 / 62))]


def test_final_ties_by_record_id():
    metas = metas_for("x", "y")
    # x: lexical 1 + semantic 2; y: lexical 2 + semantic 1 -> same fused, same recency
    hits = rank([("y", 1.0), ("x", 2.0)], [("y", 0.9), ("x", 0.1)], metas, NOW)
    assert hits[0].score == hits[1].score
    assert [h.record_id for h in hits] == ["x", "y"]


def test_equal_scores_order_by_recency_before_record_id():
    # Two records first in one channel each (same fused). Their ages differ a little, so the
    # rounded recency differs while the rounded score (0.05 x recency) can stay equal; find
    # such a pair. "a" is the older one, so record_id order alone would put it first.
    base = NOW - 10 * HALF_LIFE_MS
    for gap in range(1, 20_000):
        metas = {
            "a": DocMeta(record_id="a", valid_from_ms=base - gap),
            "b": DocMeta(record_id="b", valid_from_ms=base),
        }
        hits = rank([("a", 1.0)], [("b", 1.0)], metas, NOW)
        if hits[0].score == hits[1].score and hits[0].recency != hits[1].recency:
            break
    else:
        pytest.fail("no equal-score pair found")
    assert [h.record_id for h in hits] == ["b", "a"]
    assert hits[0].recency > hits[1].recency


def test_recency_half_life():
    assert recency(DocMeta("a", NOW), NOW) == 1.0
    assert recency(DocMeta("a", NOW - HALF_LIFE_MS), NOW) == 0.5
    assert recency(DocMeta("a", NOW - 2 * HALF_LIFE_MS), NOW) == 0.25
    assert HALF_LIFE_MS == 30 * DAY_MS
    # age is measured from valid_time.t, whatever t_end says
    assert recency(DocMeta("a", NOW - HALF_LIFE_MS, valid_to_ms=NOW + DAY_MS), NOW) == 0.5
    # future starts are clamped (only reachable outside rank, which filters them out)
    assert recency(DocMeta("a", NOW + DAY_MS), NOW) == 1.0
    assert recency(DocMeta("a", -(2**53 - 1)), NOW) == 0.0


def test_recency_moves_score_but_never_creates_hits():
    metas = {
        "old": DocMeta("old", NOW - 4 * HALF_LIFE_MS),
        "new": DocMeta("new", NOW),
        "fresh_but_unmatched": DocMeta("fresh_but_unmatched", NOW),
    }
    hits = rank([("old", 2.0), ("new", 1.0)], None, metas, NOW)
    assert [h.record_id for h in hits] == ["new", "old"]  # recency overturns a close fused
    assert "fresh_but_unmatched" not in by_id(hits)
    assert rank([], None, metas, NOW) == []
    assert rank([], [], metas, NOW) == []


@pytest.mark.parametrize(
    ("meta", "eligible"),
    [
        (DocMeta("r", NOW), True),  # valid from exactly now
        (DocMeta("r", NOW + 1), False),  # starts 1 ms later
        (DocMeta("r", NOW - 5, valid_to_ms=NOW), True),  # ends exactly now (closed)
        (DocMeta("r", NOW - 5, valid_to_ms=NOW - 1), False),  # ended 1 ms ago
        (DocMeta("r", NOW, valid_to_ms=NOW), True),  # an instant
        (DocMeta("r", NOW - 5, expires_at_ms=NOW + 1), True),  # expires 1 ms later
        (DocMeta("r", NOW - 5, expires_at_ms=NOW), False),  # expires exactly now
        (DocMeta("r", NOW - 5, expires_at_ms=NOW - 1), False),
    ],
)
def test_eligibility_boundaries(meta, eligible):
    assert is_eligible(meta, NOW) is eligible
    hits = rank([("r", 1.0)], None, {"r": meta}, NOW)
    assert [h.record_id for h in hits] == (["r"] if eligible else [])


def test_ineligible_and_unknown_docs_do_not_take_channel_ranks():
    metas = {
        "gone": DocMeta("gone", NOW - 10, expires_at_ms=NOW),
        "kept": DocMeta("kept", NOW),
    }
    hits = rank([("gone", 9.0), ("unknown", 8.0), ("kept", 1.0)], None, metas, NOW)
    assert [(h.record_id, h.fused, h.rank) for h in hits] == [("kept", 1.0, 1)]


def test_channel_input_errors():
    metas = metas_for("a")
    with pytest.raises(ValueError):
        rank([("a", math.nan)], None, metas, NOW)
    with pytest.raises(ValueError):
        rank([("a", 1.0), ("a", 2.0)], None, metas, NOW)


def test_scores_are_rounded_finite_and_bounded():
    ids = [f"mem_{i:04d}" for i in range(300)]
    metas = {i: DocMeta(i, NOW - n * 3_600_000 * 7) for n, i in enumerate(ids)}
    lexical = [(i, 1000.0 / (n + 1)) for n, i in enumerate(ids)]
    semantic = [(i, math.sin(n)) for n, i in enumerate(reversed(ids))]
    hits = rank(lexical, semantic, metas, NOW)
    assert [h.rank for h in hits] == list(range(1, 301))
    for h in hits:
        for value in (h.score, h.fused, h.recency):
            assert math.isfinite(value) and 0.0 <= value <= 1.0
            assert round_score(value) == value
        assert h.score == round_score(0.95 * h.fused + 0.05 * h.recency)
        assert len(repr(h.score).partition(".")[2]) <= 12
    keys = [(-h.score, -h.recency, h.record_id) for h in hits]
    assert keys == sorted(keys)


def test_rank_matches_the_formula_through_the_public_helpers():
    """rank() inlines the rounding for speed: every value equals the one round_score and
    recency give, and hits are RankedHit tuples."""
    import random

    rng = random.Random(5)
    ids = [f"mem_{i:04d}" for i in range(500)]
    metas = {i: DocMeta(i, NOW - rng.randint(-10, 400) * 3_600_000) for i in ids}
    lexical = [(i, rng.random() * 50) for i in ids if rng.random() < 0.8]
    for semantic in (None, [(i, rng.random()) for i in ids if rng.random() < 0.5]):
        channels = [lexical] if semantic is None else [lexical, semantic]
        raw: dict[str, float] = {}
        for hits in channels:
            eligible = sorted((h for h in hits if is_eligible(metas[h[0]], NOW)), key=lambda h: (-h[1], h[0]))
            for position, (doc_id, _) in enumerate(eligible, start=1):
                raw[doc_id] = raw.get(doc_id, 0.0) + 1.0 / (60 + position)
        ranked = rank(lexical, semantic, metas, NOW)
        assert {h.record_id for h in ranked} == set(raw)
        for h in ranked:
            assert isinstance(h, RankedHit)
            assert h.fused == round_score(min(1.0, raw[h.record_id] * 61 / len(channels)))
            assert h.recency == round_score(recency(metas[h.record_id], NOW))
            assert h.score == round_score(0.95 * h.fused + 0.05 * h.recency)


def test_round_score():
    assert round_score(0.1234567890123456) == 0.123456789012
    assert round_score(0.0000000000015) == 0.000000000002
    assert round_score(1.0) == 1.0
    assert round_score(0.0) == 0.0
    for bad in (math.inf, math.nan, -1e-300, 1.0000000000000002):
        with pytest.raises(ValueError):
            round_score(bad)


def test_profile_config():
    config = profile_config(LEXICAL_PROFILE_CONFIG)
    assert config["profile"] == PROFILE == "engram-hybrid/v2"
    assert config["score"] == {"fused_weight": 0.95, "recency_weight": 0.05}
    assert config["fusion"]["k"] == 60
    assert config["recency"]["half_life_ms"] == 30 * DAY_MS
    assert config["channels"] == {"lexical": dict(LEXICAL_PROFILE_CONFIG)}
    with_semantic = profile_config(LEXICAL_PROFILE_CONFIG, {"model": "m"})
    assert with_semantic["channels"]["semantic"] == {"model": "m"}


def test_quality_sanity_relevant_record_first():
    corpus = [
        record("mem_deploy", "We deploy the gateway with Kubernetes and a rolling update",
               others=(("evidence", "rollout logs show zero downtime"),)),
        record("mem_cache", "Use Redis as the session cache with a one hour TTL",
               others=(("context", "memcached lacked persistence we needed"),),
               sources=("doc://adr/cache-choice",)),
        record("mem_lunch", "Team lunch is on Thursdays at the Italian place"),
        record("mem_db", "The journal lives in MongoDB with majority write concern",
               others=(("evidence", "a cache of hot records sits in front"),)),
        record("mem_auth", "Hosts sign invocation contexts with Ed25519 keys"),
    ]
    projection = ScopeProjection()
    for rec in corpus:
        projection.add(rec, cursor=1)
    cases = {
        "which cache did we choose for sessions": "mem_cache",
        "how is the gateway deployed on kubernetes": "mem_deploy",
        "mongodb write concern for the journal": "mem_db",
        "ed25519 host keys": "mem_auth",
    }
    for query, expected in cases.items():
        hits = top_k([Channel.lexical(projection.scores(query))], projection.table, NOW, 1, 10).hits
        assert hits and hits[0].record_id == expected, query
