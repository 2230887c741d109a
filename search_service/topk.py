"""The exact top ``depth`` of profile ``engram-hybrid/v2`` without ranking the whole scope.

With one channel, a record's fused score depends only on its channel rank ``r``:
``fused(r) = round(61 / (60 + r))`` falls with ``r``, and ``score = round(0.95·fused +
0.05·recency)`` with ``recency <= 1``. So after the best ``M`` channel ranks are known exactly,
no record at rank ``> M`` can score above ``bound(M) = round(0.95·fused(M + 1) + 0.05)``
(rounding, multiplication by a positive constant and addition are monotone in binary64). If
the ``depth``-th best final score among the first ``M`` is above ``bound(M)``, the top ``depth``
is exact; otherwise ``M`` grows and the step repeats. Each step is vectorised selection
(numpy) plus Python arithmetic on ``M`` records only, in exactly the operations of
:func:`search_service.ranking.rank`, which stays the reference (proven equal on random
corpora in tests/search/test_topk.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from search_service.doctable import DocTable
from search_service.ranking import FUSED_WEIGHT, HALF_LIFE_MS, RECENCY_WEIGHT, RRF_K, RankedHit

_SCALE = 1e12
_FIRST_WINDOW = 64


@dataclass(frozen=True, slots=True)
class TopK:
    """``hits``: the best ``depth`` eligible records in final order. ``candidates``: how many
    eligible records matched (all were ranked; only the best are listed). ``examined``: how
    many channel ranks had to be resolved exactly (a cost figure)."""

    hits: tuple[RankedHit, ...]
    candidates: int
    examined: int


def _fused(position: int) -> float:
    # rank(): raw = 0.0 + 1.0 / (60 + r); fused = round(min(1.0, raw * (60 + 1) / 1))
    return math.floor(min(1.0, (0.0 + 1.0 / (RRF_K + position)) * float(RRF_K + 1)) * _SCALE + 0.5) / _SCALE


def _bound(position: int) -> float:
    """The highest final score a record at channel rank ``position`` or worse can have."""
    return math.floor((FUSED_WEIGHT * _fused(position) + RECENCY_WEIGHT * 1.0) * _SCALE + 0.5) / _SCALE


def top_k(scores: npt.NDArray[np.float64], table: DocTable, now_ms: int, system_as_of: int,
          depth: int) -> TopK:
    """The exact first ``depth`` hits of :func:`search_service.ranking.rank` over the single
    lexical channel, for the records eligible at ``now_ms`` and accepted by ``system_as_of``.
    ``scores`` is the channel's score per table slot (0.0 = no match)."""
    if depth < 1:
        raise ValueError("depth must be positive")
    matched = np.flatnonzero(scores)
    slots = matched[table.eligible(matched, now_ms, system_as_of)]
    values = scores[slots]
    n = len(slots)
    if n == 0:
        return TopK((), 0, 0)
    if not np.isfinite(values).all():
        raise ValueError("channel scores must be finite")
    window = min(n, max(_FIRST_WINDOW, 2 * depth))
    ids = table.ids
    floor = math.floor
    while True:
        if window < n:
            threshold = np.partition(values, n - window)[n - window]
            chosen = np.flatnonzero(values >= threshold)  # every tie at the threshold too
        else:
            chosen = np.arange(n)
        # Exact channel ranks of the chosen: every eligible record scoring higher is chosen.
        ordered = sorted(zip((-values[chosen]).tolist(), [ids[s] for s in slots[chosen].tolist()]))
        fresh_of = _recencies(table, slots[chosen], ids, now_ms)
        final: list[tuple[float, float, str, float]] = []
        for position, (_, record_id) in enumerate(ordered, start=1):
            fused = _fused(position)
            fresh = fresh_of[record_id]
            score = floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
            final.append((-score, -fresh, record_id, fused))
        examined = len(final)
        final.sort()
        best = final[:depth]
        if examined == n or (len(best) == depth and -best[-1][0] > _bound(examined + 1)):
            make = tuple.__new__
            hits = tuple(
                make(RankedHit, (record_id, -neg_score, i, fused, -neg_fresh))
                for i, (neg_score, neg_fresh, record_id, fused) in enumerate(best, start=1)
            )
            return TopK(hits, n, examined)
        window = min(n, 4 * window)


def _recencies(table: DocTable, chosen: npt.NDArray[np.int64], ids: list[str], now_ms: int) -> dict[str, float]:
    """Rounded recency per chosen record id (scalar pow, as in rank())."""
    floor = math.floor
    starts = table.valid_from[chosen].tolist()
    return {
        ids[slot]: floor(0.5 ** (max(0, now_ms - start) / HALF_LIFE_MS) * _SCALE + 0.5) / _SCALE
        for slot, start in zip(chosen.tolist(), starts)
    }
