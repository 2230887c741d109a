"""The exact top ``depth`` of profile ``engram-hybrid/v2`` without ranking the whole scope.

A record's fused score depends only on its rank in each channel used, and falls as any of
them grows: ``fused = round(min(1, Σ_c 1/(60 + r_c) · 61/channels))``, ``score = round(0.95·fused
+ 0.05·recency)`` with ``recency <= 1``. So the best ``W`` records of each channel are ranked
exactly (vectorised selection, every tie at the cut included), and for each record seen in a
window its final score is either exact (it is in every channel's window, or provably no hit of
the channel it is missing from) or bounded above by putting it at rank ``W + 1`` of each
channel it is missing from. A record in no window is bounded by rank ``W + 1`` everywhere.
When the ``depth``-th best exact score is above every bound, the top ``depth`` is exact;
otherwise ``W`` grows (×4) and the step repeats (at ``W`` = every hit it is the full ranking).

The arithmetic is exactly that of :func:`search_service.ranking.rank` (channel contributions
summed in the same order, the same roundings; rounding, multiplication by a positive constant
and addition are monotone in binary64, so the bounds hold), which stays the reference (proven
equal on random corpora with one and two channels in tests/search/test_topk.py).
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

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class TopK:
    """``hits``: the best ``depth`` eligible records in final order. ``candidates``: how many
    eligible records matched in any channel (all were ranked; only the best are listed).
    ``examined``: how many records had to be looked at (a cost figure)."""

    hits: tuple[RankedHit, ...]
    candidates: int
    examined: int


@dataclass(frozen=True, slots=True)
class Channel:
    """One channel's score per table slot and which slots it lists (its hits)."""

    scores: FloatArray
    hits: BoolArray

    @classmethod
    def lexical(cls, scores: FloatArray) -> "Channel":
        """BM25 scores: a slot is a hit when it scores (0.0 = no matching term)."""
        return cls(scores, scores != 0)

    @classmethod
    def above(cls, scores: FloatArray, floor: float) -> "Channel":
        """Similarities: a slot is a hit when it scores above ``floor``."""
        return cls(scores, scores > floor)


class _Ranked:
    """The exact ranks of a channel's best ``window`` eligible hits."""

    __slots__ = ("rank", "slot_of", "known", "complete")

    def __init__(self, slots: npt.NDArray[np.int64], values: FloatArray, ids: list[str], window: int) -> None:
        n = len(slots)
        if window < n:
            threshold = np.partition(values, n - window)[n - window]
            chosen = np.flatnonzero(values >= threshold)  # every tie at the threshold too
        else:
            chosen = np.arange(n)
        chosen_slots = slots[chosen].tolist()
        self.slot_of = {ids[s]: s for s in chosen_slots}
        ordered = sorted(zip((-values[chosen]).tolist(), self.slot_of))
        self.rank = {record_id: position for position, (_, record_id) in enumerate(ordered, start=1)}
        self.known = len(ordered)
        self.complete = self.known == n


def top_k(channels: list[Channel], table: DocTable, now_ms: int, system_as_of: int, depth: int) -> TopK:
    """The exact first ``depth`` hits of :func:`search_service.ranking.rank` over ``channels``
    (lexical first, then semantic, as rank() takes them), for the records eligible at
    ``now_ms`` and accepted by ``system_as_of``."""
    if depth < 1:
        raise ValueError("depth must be positive")
    if not channels:
        raise ValueError("at least one channel")
    listed = channels[0].hits.copy()
    for channel in channels[1:]:
        listed |= channel.hits
    matched = np.flatnonzero(listed)
    eligible = np.zeros(table.size, np.bool_)
    eligible[matched[table.eligible(matched, now_ms, system_as_of)]] = True
    n = int(eligible.sum())
    if n == 0:
        return TopK((), 0, 0)
    ids = table.ids
    per_channel: list[tuple[npt.NDArray[np.int64], FloatArray, BoolArray]] = []
    for channel in channels:
        hit = channel.hits & eligible
        slots = np.flatnonzero(hit)
        values = channel.scores[slots]
        if not np.isfinite(values).all():
            raise ValueError("channel scores must be finite")
        per_channel.append((slots, values, hit))
    scale = (RRF_K + 1) / len(channels)
    floor = math.floor
    window = max(_FIRST_WINDOW, 2 * depth)
    while True:
        ranked = [_Ranked(slots, values, ids, window) for slots, values, _ in per_channel]
        seen: dict[str, int] = {}
        for channel_ranked in ranked:
            seen.update(channel_ranked.slot_of)
        exact: list[tuple[float, float, str, float]] = []
        ceiling = -1.0  # the best score a record not known exactly could reach
        for record_id, slot in seen.items():
            total = bound = 0.0
            known = True
            for (_, _, hit), channel_ranked in zip(per_channel, ranked):
                position = channel_ranked.rank.get(record_id)
                if position is not None:
                    total += 1.0 / (RRF_K + position)
                    bound += 1.0 / (RRF_K + position)
                elif hit[slot] and not channel_ranked.complete:
                    known = False
                    bound += 1.0 / (RRF_K + channel_ranked.known + 1)
            fresh = floor(0.5 ** (max(0, now_ms - int(table.valid_from[slot])) / HALF_LIFE_MS) * _SCALE + 0.5) / _SCALE
            if known:
                fused = floor(min(1.0, total * scale) * _SCALE + 0.5) / _SCALE
                score = floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
                exact.append((-score, -fresh, record_id, fused))
            else:
                ceiling = max(ceiling, _score(bound * scale, fresh))
        if any(not r.complete for r in ranked):
            unseen = 0.0
            for channel_ranked in ranked:
                if not channel_ranked.complete:
                    unseen += 1.0 / (RRF_K + channel_ranked.known + 1)
            ceiling = max(ceiling, _score(unseen * scale, 1.0))
        exact.sort()
        best = exact[:depth]
        everything = all(r.complete for r in ranked)
        if everything or (len(best) == depth and -best[-1][0] > ceiling):
            make = tuple.__new__
            hits = tuple(
                make(RankedHit, (record_id, -neg_score, i, fused, -neg_fresh))
                for i, (neg_score, neg_fresh, record_id, fused) in enumerate(best, start=1)
            )
            return TopK(hits, n, len(seen))
        window = 4 * window


def _score(scaled: float, fresh: float) -> float:
    fused = math.floor(min(1.0, scaled) * _SCALE + 0.5) / _SCALE
    return math.floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
