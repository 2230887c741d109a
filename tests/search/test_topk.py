"""top_k: the exact first ``depth`` hits of rank() without ranking the whole scope."""

import random

import numpy as np
import pytest

from search_service.doctable import DocTable
from search_service.lexical import FIELDS, LexicalIndex
from search_service.ranking import HALF_LIFE_MS, DocMeta, rank
from search_service import topk
from search_service.topk import _FIRST_WINDOW, Channel, top_k

NOW = 1_800_000_000_000
DAY = 86_400_000


def reference(scores: np.ndarray, table: DocTable, now: int, pin: int, depth: int):
    """rank() over every live slot accepted by the pin (the whole scope, sorted)."""
    hits, metas = [], {}
    for slot in range(table.size):
        if table.alive[slot] and table.accepted_at[slot] <= pin and scores[slot] > 0:
            meta = table.meta(slot)
            metas[meta.record_id] = meta
            hits.append((meta.record_id, float(scores[slot])))
    ranked = rank(hits, None, metas, now)
    return ranked[:depth], len(ranked)


def random_meta(rng: random.Random, record_id: str) -> DocMeta:
    start = NOW - rng.choice([0, 1, 5, 40, 400, 4000]) * DAY - rng.randint(0, DAY)
    if rng.random() < 0.05:
        start = NOW + DAY  # not valid yet
    end = None if rng.random() < 0.9 else NOW + rng.choice([-DAY, 0, DAY])
    expires = None if rng.random() < 0.9 else NOW + rng.choice([-DAY, 0, 1, DAY])
    return DocMeta(record_id=record_id, valid_from_ms=start, valid_to_ms=end, expires_at_ms=expires)


def random_table(rng: random.Random, sizes: list[int]) -> tuple[DocTable, list[float]]:
    """A table of random validity, pins and a tenth removed, and score levels to draw from
    (few distinct values make long ties; zero means no match)."""
    table = DocTable()
    n = rng.choice(sizes)
    for i in range(n):
        table.add(random_meta(rng, f"mem_{rng.getrandbits(40):010x}{i}"), accepted_at=rng.randint(1, 10))
    for record_id in rng.sample(table.ids, k=n // 10):
        table.remove(record_id)
    return table, [0.0] + [rng.uniform(0.01, 30.0) for _ in range(rng.choice([1, 3, 40, 10_000]))]


def test_matches_rank_on_random_score_vectors():
    rng = random.Random(5)
    for case in range(120):
        table, levels = random_table(rng, [1, 3, 50, 300, 2500])
        scores = np.array([rng.choice(levels) for _ in range(table.size)], np.float64)
        pin = rng.randint(1, 10)
        depth = rng.choice([1, 10, 50, 200])
        expected, count = reference(scores, table, NOW, pin, depth)
        got = top_k([Channel.lexical(scores)], table, NOW, pin, depth)
        assert list(got.hits) == expected, case
        assert got.candidates == count
        assert got.examined <= count


def reference_fused(lexical: np.ndarray, semantic: np.ndarray, table: DocTable, now: int, pin: int, depth: int):
    """rank() with both channels over every live slot accepted by the pin."""
    metas, lex, sem = {}, [], []
    for slot in range(table.size):
        if not (table.alive[slot] and table.accepted_at[slot] <= pin):
            continue
        meta = table.meta(slot)
        metas[meta.record_id] = meta
        if lexical[slot] != 0:
            lex.append((meta.record_id, float(lexical[slot])))
        if semantic[slot] > 0:
            sem.append((meta.record_id, float(semantic[slot])))
    ranked = rank(lex, sem, metas, now)
    return ranked[:depth], len(ranked)


@pytest.mark.parametrize("broadcast_limit", [topk._BROADCAST_LIMIT, 0])
def test_two_channels_match_rank_on_random_score_vectors(monkeypatch: pytest.MonkeyPatch, broadcast_limit: int):
    """Fused top-k (lexical + semantic, RRF) equals rank() over the whole scope: random
    eligibility, ties in either channel, channels that agree, disagree or barely overlap; a
    tie's record ids compared at once or, past the limit, through a sort of the tie."""
    monkeypatch.setattr(topk, "_BROADCAST_LIMIT", broadcast_limit)
    check_two_channels(random.Random(11), 150, random_table)


def odd_ids_table(rng: random.Random, sizes: list[int]) -> tuple[DocTable, list[float]]:
    """Record ids of every length, prefixes of each other and outside ASCII (the table's
    UTF-8 keys must order them as Python orders the ids), longer than the key column's width."""
    table = DocTable()
    alphabet = ["a", "b", "z", "é", "ß", "中", "\U0001f600", "~"]
    ids: set[str] = set()
    n = rng.choice(sizes)
    while len(ids) < n:
        ids.add("mem_" + "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 2, 5, 60]))))
    for record_id in sorted(ids, key=lambda _: rng.random()):
        table.add(random_meta(rng, record_id), accepted_at=rng.randint(1, 10))
    return table, [0.0] + [rng.uniform(0.01, 30.0) for _ in range(rng.choice([1, 3, 40]))]


def test_two_channels_order_ties_by_record_id_of_any_shape():
    check_two_channels(random.Random(12), 40, odd_ids_table)


def check_two_channels(rng: random.Random, cases: int, make_table) -> None:
    for case in range(cases):
        table, levels = make_table(rng, [1, 4, 60, 400, 3000])
        lexical = np.array([rng.choice(levels) if rng.random() < rng.choice([0.05, 0.5, 1.0]) else 0.0
                            for _ in range(table.size)], np.float64)
        mode = rng.choice(["random", "agree", "reverse", "ties"])
        if mode == "random":
            semantic = np.array([rng.uniform(-0.2, 1.0) for _ in range(table.size)], np.float64)
        elif mode == "agree":
            semantic = np.where(lexical > 0, lexical / 31.0, rng.uniform(-0.1, 0.05))
        elif mode == "reverse":
            semantic = np.where(lexical > 0, 1.0 - lexical / 31.0, 0.5)
        else:
            semantic = np.array([rng.choice([-0.5, 0.0, 0.25, 0.5, 0.75]) for _ in range(table.size)], np.float64)
        pin = rng.randint(1, 10)
        depth = rng.choice([1, 10, 50, 200])
        expected, count = reference_fused(lexical, semantic, table, NOW, pin, depth)
        got = top_k([Channel.lexical(lexical), Channel.above(semantic, 0.0)], table, NOW, pin, depth)
        assert list(got.hits) == expected, (case, mode)
        assert got.candidates == count


def test_fusion_against_a_hand_computed_fixture():
    """Three records, equal recency: a = lexical 1 / semantic 3, b = lexical 2 / semantic 1,
    c = semantic 2 only. fused = (Σ 1/(60 + r)) · 61 / 2, rounded to 12 decimals; score =
    0.95 · fused + 0.05 · 1."""
    table = DocTable()
    for record_id in ("mem_a", "mem_b", "mem_c"):
        table.add(DocMeta(record_id, valid_from_ms=NOW), accepted_at=1)
    lexical = np.array([5.0, 4.0, 0.0])
    semantic = np.array([0.3, 0.9, 0.6])
    got = top_k([Channel.lexical(lexical), Channel.above(semantic, 0.0)], table, NOW, 1, 10)
    # b: (1/62 + 1/61) * 30.5; a: (1/61 + 1/63) * 30.5; c: (1/62) * 30.5
    fused = {"mem_b": 0.991935483871, "mem_a": 0.984126984127, "mem_c": 0.491935483871}
    assert [h.record_id for h in got.hits] == ["mem_b", "mem_a", "mem_c"]
    assert [h.fused for h in got.hits] == list(fused.values())
    assert [h.score for h in got.hits] == [0.992338709677, 0.984920634921, 0.517338709677]
    assert got.candidates == 3
    # The semantic channel alone changes nothing for records it does not list.
    alone = top_k([Channel.lexical(lexical), Channel.above(np.array([-0.1, -0.2, -0.3]), 0.0)], table, NOW, 1, 10)
    assert [(h.record_id, h.fused) for h in alone.hits] == [("mem_a", round(30.5 / 61, 12)), ("mem_b", round(30.5 / 62, 12))]


def test_matches_rank_over_a_real_lexical_index():
    rng = random.Random(9)
    words = ["cache", "caches", "deploy", "harbour", "lru", "redis", "ml", "kg", "queue", "the"]
    for _ in range(30):
        table, index = DocTable(), LexicalIndex()
        for i in range(rng.randint(1, 400)):
            slot = table.add(random_meta(rng, f"mem_{i:05d}"), accepted_at=1)
            index.add(slot, {f: " ".join(rng.choices(words, k=rng.randint(0, 6))) for f in FIELDS if rng.random() < 0.5})
        query = " ".join(rng.choices(words, k=rng.randint(1, 3)))
        scores = index.scores(query, table.size)
        for depth in (1, 7, 60):
            expected, count = reference(scores, table, NOW, 1, depth)
            got = top_k([Channel.lexical(scores)], table, NOW, 1, depth)
            assert list(got.hits) == expected and got.candidates == count


def test_recency_can_force_a_wider_window():
    """Old records at the top of the channel, fresh ones far below: a deep pin's last score is
    so low that recency (0.05) could lift records from far below it, so the first window is
    not enough and must grow."""
    table = DocTable()
    n = 6000
    for i in range(n):
        age = 4000 * DAY if i < 3000 else 0  # the best 3000 by score are ~11 years old
        table.add(DocMeta(record_id=f"mem_{i:05d}", valid_from_ms=NOW - age), accepted_at=1)
    scores = np.array([float(n - i) for i in range(n)], np.float64)
    depth = 1000
    got = top_k([Channel.lexical(scores)], table, NOW, 1, depth)
    expected, _ = reference(scores, table, NOW, 1, depth)
    assert list(got.hits) == expected
    assert got.examined > max(_FIRST_WINDOW, 2 * depth)
    assert any(hit.recency > 0.99 for hit in got.hits)  # fresh records made it in


def test_eligibility_and_snapshot_columns():
    table = DocTable()
    base = dict(valid_from_ms=NOW - HALF_LIFE_MS)
    table.add(DocMeta("mem_ok", **base), accepted_at=5)
    table.add(DocMeta("mem_later", **base), accepted_at=6)  # accepted after the pin
    table.add(DocMeta("mem_future", valid_from_ms=NOW + 1), accepted_at=1)
    table.add(DocMeta("mem_ended", valid_from_ms=NOW - 10, valid_to_ms=NOW - 1), accepted_at=1)
    table.add(DocMeta("mem_end_now", valid_from_ms=NOW - 10, valid_to_ms=NOW), accepted_at=1)
    table.add(DocMeta("mem_expired", valid_from_ms=NOW - 10, expires_at_ms=NOW), accepted_at=1)
    table.add(DocMeta("mem_expiring", valid_from_ms=NOW - 10, expires_at_ms=NOW + 1), accepted_at=1)
    table.add(DocMeta("mem_gone", **base), accepted_at=1)
    table.remove("mem_gone")
    got = top_k([Channel.lexical(np.ones(table.size))], table, NOW, 5, 10)
    assert sorted(h.record_id for h in got.hits) == ["mem_end_now", "mem_expiring", "mem_ok"]
    assert got.candidates == 3
    assert top_k([Channel.lexical(np.zeros(table.size))], table, NOW, 5, 10).hits == ()


def test_refusals():
    table = DocTable()
    table.add(DocMeta("mem_a", valid_from_ms=0), accepted_at=0)
    with pytest.raises(ValueError):
        top_k([Channel.lexical(np.ones(1))], table, NOW, 0, 0)
    with pytest.raises(ValueError):
        top_k([Channel.lexical(np.array([np.inf]))], table, NOW, 0, 1)
    with pytest.raises(ValueError):
        table.add(DocMeta("mem_a", valid_from_ms=0), accepted_at=0)


def test_table_compaction_keeps_metas_and_order():
    rng = random.Random(3)
    table = DocTable()
    metas = [random_meta(rng, f"mem_{i:04d}") for i in range(3000)]
    for i, meta in enumerate(metas):
        table.add(meta, accepted_at=i)
    dead = set(rng.sample(range(3000), 1700))
    for i in dead:
        table.remove(metas[i].record_id)
    remap = table.compact()
    survivors = [i for i in range(3000) if i not in dead]
    assert table.size == len(table) == len(survivors)
    assert [int(remap[i]) for i in survivors] == list(range(len(survivors)))
    assert all(remap[i] == -1 for i in dead)
    for new, old in enumerate(survivors):
        assert table.meta(new) == metas[old] and table.slot(metas[old].record_id) == new
        assert table.accepted_at[new] == old and table.alive[new]
    assert metas[next(iter(dead))].record_id not in table


def test_projection_compacts_after_many_removals_and_keeps_answers():
    from search_service.projection import COMPACT_MIN_DEAD, ScopeProjection

    from .helpers import record

    projection = ScopeProjection()
    total = 2 * COMPACT_MIN_DEAD + 10
    for i in range(total):
        projection.add(record(f"mem_{i:05d}", f"harbour crane number{i % 7}"), cursor=i + 1)
    before = top_k([Channel.lexical(projection.scores("harbour number3"))], projection.table, NOW, total, 50)
    keep = {hit.record_id for hit in before.hits[:20]}
    removed = 0
    for i in range(total):
        record_id = f"mem_{i:05d}"
        if record_id not in keep and removed < COMPACT_MIN_DEAD + 5:
            assert projection.remove(record_id)
            removed += 1
    assert projection.table.size < total  # compacted: dead slots renumbered away
    assert projection.table.size == len(projection.table) == len(projection.records) == len(projection.index)
    after = top_k([Channel.lexical(projection.scores("harbour number3"))], projection.table, NOW, total, 50)
    fresh = ScopeProjection()
    for record_id in sorted(projection.records):
        fresh.add(projection.record(record_id), cursor=1)
    expected = top_k([Channel.lexical(fresh.scores("harbour number3"))], fresh.table, NOW, total, 50)
    assert after.hits == expected.hits and after.candidates == expected.candidates
    assert not projection.remove("mem_unknown")


def test_hits_are_ranked_hits_made_where_read() -> None:
    """A pinned list's hits are RankedHits (rank = position + 1) wherever they are read: by
    index, negative index, slice, iteration; equal to the same RankedHits in any sequence."""
    from search_service.ranking import RankedHit
    from search_service.topk import Hits

    ids = ["mem_a", "mem_b", "mem_c"]
    hits = Hits(ids, np.array([0.9, 0.5, 0.5]), np.array([1.0, 0.5, 0.4]), np.array([0.1, 1.0, 0.2]))
    expected = (RankedHit("mem_a", 0.9, 1, 1.0, 0.1), RankedHit("mem_b", 0.5, 2, 0.5, 1.0),
                RankedHit("mem_c", 0.5, 3, 0.4, 0.2))
    assert len(hits) == 3 and hits.ids == ids
    assert hits[0] == expected[0] and hits[-1] == expected[2] and hits[1:] == expected[1:] and hits[5:] == ()
    assert tuple(hits) == expected and hits == expected and hits == list(expected)
    assert hits != expected[:2] and hits != (*expected[:2], RankedHit("mem_c", 0.5, 3, 0.4, 0.25))
    assert all(type(h.score) is float and type(h.rank) is int for h in hits)  # JSON-ready, not numpy scalars
    with pytest.raises(IndexError):
        hits[3]
    with pytest.raises(IndexError):
        hits[-4]
    with pytest.raises(ValueError):
        Hits(ids, np.zeros(2), np.zeros(3), np.zeros(3))


@pytest.mark.parametrize("seed", range(6))
def test_kth_largest_is_numpy_partition_whatever_the_order(seed: int) -> None:
    """The sampled threshold's k-th largest equals np.partition's on random, ascending,
    descending, tied and tiny inputs, at every edge of k (both of its paths are taken)."""
    rng = np.random.default_rng(seed)
    for n in (2, 3, 40, 1_000, 20_000):
        base = rng.random(n) * 10
        # the last: the sample holds the largest values, so fewer than k reach its threshold
        for values in (base, np.sort(base), np.sort(base)[::-1], np.round(base), np.zeros(n) + 0.5,
                       np.r_[np.zeros(n - 1), 1.0], np.where(np.arange(n) % topk._SAMPLE_STEP == 0, 100 + base, base)):
            values = np.ascontiguousarray(values)
            for k in {1, 2, n // 3 or 1, max(1, n - 2), n - 1} - {0, n}:
                want = np.partition(values, n - k)[n - k]
                assert topk.kth_largest(values, k) == want, (n, k)
