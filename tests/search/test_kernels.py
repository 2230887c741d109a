"""The compiled kernels equal the numpy expressions they replace, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from search_service import kernels
from search_service.doctable import OPEN, DocTable
from search_service.ranking import HALF_LIFE_MS, RECENCY_BASE, DocMeta, recency_from, round_score

K1, B = 1.2, 0.75


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int32, np.float64])
@pytest.mark.parametrize("seed", range(5))
def test_accumulate_is_the_numpy_expression_bit_for_bit(dtype: type, seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = 5_000
    lengths = rng.integers(1, 400, size + 100).astype(np.int32)
    docs = np.sort(rng.choice(size + 100, 3_000, replace=False)).astype(np.int32)  # some beyond size
    tfs = rng.integers(1, 200, len(docs)).astype(dtype)
    factor, base, slope = float(rng.uniform(0.1, 9)), K1 * (1.0 - B), float(rng.uniform(0.001, 0.1))
    start = rng.uniform(0, 3, size)
    expected = start.copy()
    keep = docs < size
    tf = tfs[keep].astype(np.float64)
    expected[docs[keep]] += factor * tf / (tf + base + slope * lengths[docs[keep]])
    got = start.copy()
    kernels.accumulate(got, docs, tfs, factor, base, slope, lengths, size)
    assert got.tobytes() == expected.tobytes()


def test_eligible_is_the_rule_at_every_boundary() -> None:
    now, pin = 1_000_000, 50
    table = DocTable()
    cases = [  # (valid_from, valid_to, expires, accepted_at, eligible)
        (now, None, None, pin, True),          # valid from now, accepted at the pin
        (now + 1, None, None, 1, False),       # not valid yet
        (1, now, None, 1, True),               # closed interval: valid until now included
        (1, now - 1, None, 1, False),          # ended
        (1, None, now + 1, 1, True),           # expires after now
        (1, None, now, 1, False),              # expires at now
        (1, None, None, pin + 1, False),       # accepted after the pin
        (1, None, None, 1, True),              # removed below
        (1, None, None, 1, False),             # not listed below
    ]
    for i, (start, end, expires, accepted, _) in enumerate(cases):
        table.add(DocMeta(f"mem_{i:02d}", start, end, expires), accepted)
    table.remove("mem_07")
    listed = np.ones(table.size, np.bool_)
    listed[8] = False
    mask, count = table.eligible(listed, now, pin)
    expected = [ok for *_, ok in cases]
    expected[7] = False
    assert mask.tolist() == expected
    assert count == sum(expected)
    assert int(table.valid_to[0]) == OPEN


@pytest.mark.parametrize("seed", range(4))
def test_a_kept_eligibility_window_answers_as_the_full_pass(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """DocTable.eligible keeps the slots valid at an instant until the next instant a record's
    validity or retention begins or ends (for pins at or after every acceptance): through
    adds, removals, compactions, a clock moving a millisecond at a time (every boundary is
    met), standing still or going back, and older pins, it answers what the full pass does."""
    builds = []
    real = kernels.eligible_until
    monkeypatch.setattr(kernels, "eligible_until", lambda *args: builds.append(1) or real(*args))
    rng = random.Random(seed)
    table, now, cursor, added, asked = DocTable(), 1_000_000, 0, 0, 0
    for _ in range(1500):
        op = rng.random()
        if op < 0.2 or len(table) == 0:
            cursor += 1
            start = now + rng.randint(-40, 40)
            end = None if rng.random() < 0.5 else start + rng.randint(-5, 60)
            expires = None if rng.random() < 0.6 else now + rng.randint(-10, 70)
            table.add(DocMeta(f"mem_{added:04d}", start, end, expires), cursor)
            added += 1
        elif op < 0.25:
            table.remove(rng.choice([table.ids[s] for s in range(table.size) if table.alive[s]]))
        elif op < 0.27:
            table.compact()
        else:
            now += rng.choice([0, 1, 1, 1, 2, 3, 7, -2])
            pin = cursor if rng.random() < 0.85 else rng.randint(0, cursor)
            listed = np.array([rng.random() < 0.8 for _ in range(table.size + rng.randint(0, 3))], np.bool_)
            got, count = table.eligible(listed, now, pin)
            want, want_count = kernels.eligible(listed, table.alive, table.accepted_at, table.valid_from,
                                                table.valid_to, table.expires, now, pin)
            assert got.tolist() == want.tolist() and count == want_count
            asked += 1
    assert 0 < len(builds) < asked / 2  # kept windows were reused


def test_hits_of_lists_eligible_hits_with_their_scores_and_flags_non_finite() -> None:
    rng = np.random.default_rng(3)
    scores = rng.uniform(0, 5, 1_000)
    hits, eligible = scores > 2.0, rng.random(1_000) < 0.7
    mask, slots, values, finite = kernels.hits_of(hits, eligible, scores, int(eligible.sum()))
    assert finite
    assert mask.tolist() == (hits & eligible).tolist()
    assert slots.tolist() == np.flatnonzero(hits & eligible).tolist()
    assert values.tobytes() == scores[slots].tobytes()
    scores[int(slots[3])] = np.inf
    assert not kernels.hits_of(hits, eligible, scores, int(eligible.sum()))[3]
    scores[int(slots[3])] = np.nan
    assert not kernels.hits_of(hits, eligible, scores, int(eligible.sum()))[3]
    scores[int(np.flatnonzero(~eligible)[0])] = np.nan  # not a hit of the channel: not looked at
    scores[int(slots[3])] = 1.0
    assert kernels.hits_of(hits, eligible, scores, int(eligible.sum()))[3]


@pytest.mark.parametrize("seed", range(20))
def test_kth_largest_is_numpy_partition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3_000))
    values = rng.integers(0, max(2, n // 10), n).astype(np.float64) / 7.0  # many ties
    for k in sorted({1, n, int(rng.integers(1, n + 1)), min(n, 64)}):
        assert kernels.kth_largest(values, k) == np.partition(values, n - k)[n - k]


@pytest.mark.parametrize("seed", range(6))
def test_rank_counts_and_members_are_the_numpy_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Few distinct scores (many ties), as BM25 gives, or continuous ones, as cosine gives.
    values = (rng.integers(0, 40, 3_000) / 7.0 if seed % 2 else rng.normal(0, 1, 3_000)).astype(np.float64)
    asked = np.concatenate([rng.choice(values, 50), [values.min(), values.max(), values.min() - 1, values.max() + 1]])
    wanted = np.unique(asked)
    greater, equal, at = kernels.rank_counts(values, wanted)
    assert greater.tolist() == [int((values > w).sum()) for w in wanted]
    assert equal.tolist() == [int((values == w).sum()) for w in wanted]
    assert at.tolist() == np.searchsorted(wanted, values).tolist()
    chosen = rng.random(len(wanted)) < 0.5
    assert kernels.members(values, wanted, at, chosen).tolist() == np.flatnonzero(
        np.isin(values, wanted[chosen])).tolist()
    assert kernels.members(values, wanted, at, np.zeros(len(wanted), np.bool_)).tolist() == []
    assert [len(a) for a in kernels.rank_counts(values, wanted[:0])] == [0, 0, len(values)]
    empty_greater, empty_equal, _ = kernels.rank_counts(values[:0], wanted)
    assert empty_greater.tolist() == [0] * len(wanted) and empty_equal.tolist() == [0] * len(wanted)


@pytest.mark.parametrize("wanted", [
    [0.5], [-1e308, 1e308], [0.0, 5e-324, 1e-323], [1.0, 1.0 + 2**-52], [0.0] + [1e-12 * k for k in range(1, 50)] + [1e6]])
def test_rank_counts_are_exact_for_degenerate_spans(wanted: list[float]) -> None:
    """One entry, a span that overflows, a subnormal span, adjacent doubles, entries crowded
    in one bucket: the buckets only narrow the search, never change its answer."""
    ordered = np.array(wanted, np.float64)
    values = np.concatenate([ordered, np.nextafter(ordered, -np.inf), np.nextafter(ordered, np.inf),
                             [-np.finfo(np.float64).max, 0.0, 0.75, np.finfo(np.float64).max]])
    greater, equal, at = kernels.rank_counts(values, ordered)
    assert greater.tolist() == [int((values > w).sum()) for w in ordered]
    assert equal.tolist() == [int((values == w).sum()) for w in ordered]
    assert at.tolist() == np.searchsorted(ordered, values).tolist()
    every = np.ones(len(ordered), np.bool_)
    assert kernels.members(values, ordered, at, every).tolist() == np.flatnonzero(np.isin(values, ordered)).tolist()


@pytest.mark.parametrize("seed", range(3))
def test_recency_is_round_score_of_recency_from_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    now = 1_790_000_000_000 + seed
    ages = np.concatenate([
        rng.integers(0, 10 * HALF_LIFE_MS, 20_000),  # the usual: up to ten half lives
        rng.integers(0, 4_000, 2_000),  # fresh: recency just below 1
        rng.integers(-10**12, 0, 500),  # valid in the future: age 0
        HALF_LIFE_MS * np.arange(0, 1200, 7),  # exact half lives, down to underflow (0.0)
        rng.integers(10**14, 10**15, 200),  # far past: 0.0
    ])
    valid_from = (now - ages).astype(np.int64)
    got = kernels.recency(valid_from, now, RECENCY_BASE, HALF_LIFE_MS, 1e12)
    want = [round_score(recency_from(int(v), now)) for v in valid_from.tolist()]
    assert got.tolist() == want  # == on floats: bit for bit (no NaN here)
    assert got.max() == 1.0 and got.min() == 0.0


def test_warm_compiles_every_signature_the_service_calls() -> None:
    kernels.warm()
    # (positions is compiled into rank_counts; loaded from numba's cache, its own dispatcher
    # lists no signature, and the service never calls it directly)
    for kernel in (kernels.accumulate, kernels.eligible, kernels.hits_of, kernels.kth_largest, kernels.rank_counts,
                   kernels.members, kernels.recency, kernels.eligible_until, kernels.listed_in):
        assert kernel.signatures, kernel
    assert {str(sig[2].dtype) for sig in kernels.accumulate.signatures} >= {"uint8", "uint16", "int32", "float64"}
