"""The exact top ``depth`` of profile ``engram-hybrid/v2`` without ranking the whole scope.

A record's fused score depends only on its rank in each channel used, and falls as any of
them grows: ``fused = round(min(1, Σ_c 1/(60 + r_c) · 61/channels))``, ``score = round(0.95·fused
+ 0.05·recency)`` with ``recency <= 1``. A hit's exact rank in a channel is ``1 + #higher +
#equal with a smaller record_id``: a position in a sorted window, or counted over the channel.
The candidates are the records in some channel's best ``W`` (every tie at the cut included);
each gets its exact rank in every channel that lists it, hence its exact final score. A record
in no channel's best ``W`` is below ``W`` in every channel that lists it, so it scores at most
``round(0.95·round(Σ_c 1/(61 + W_c)·61/channels) + 0.05)``. When the ``depth``-th best
candidate is strictly above that bound, the top ``depth`` is exact; otherwise ``W`` grows (×4)
and the step repeats (at ``W`` = every hit it is the full ranking).

The arithmetic is exactly that of :func:`search_service.ranking.rank` (channel contributions
summed in the same order, the same roundings; rounding, multiplication by a positive constant
and addition are monotone in binary64, so the bound holds), which stays the reference (proven
equal on random corpora with one and two channels in tests/search/test_topk.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from search_service import kernels
from search_service.doctable import DocTable
from search_service.ranking import FUSED_WEIGHT, RECENCY_WEIGHT, RRF_K, RankedHit, recency_from, round_score

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


class _Ranks:
    """Exact 1-based ranks in one channel (score desc, record_id asc) of any of its eligible
    hits: ``1 + #higher + #(equal with a smaller record_id)``. Within the channel's best
    ``window`` (every tie at the cut included, so every record scoring at least as well as one
    of them is in it) a rank is the record's position in that set sorted by (score desc,
    record_id asc); outside it (a record another channel brought) it is counted in one pass
    over the channel's scores, made only then."""

    __slots__ = ("hit", "slots", "values", "n", "_ids", "_ties", "_top_rank", "top_ids")

    def __init__(self, hits: BoolArray, eligible: BoolArray, count: int, scores: FloatArray, ids: list[str]) -> None:
        self.hit, self.slots, self.values, finite = kernels.hits_of(hits, eligible, scores, count)
        if not finite:
            raise ValueError("channel scores must be finite")
        self.n = len(self.slots)
        self._ids = ids
        self._ties: dict[float, list[str]] = {}
        self._top_rank: dict[int, int] = {}
        # The record ids of the last top()'s slots (in slot order), as a numpy string array.
        self.top_ids: npt.NDArray[np.str_] = np.array([], np.str_)

    def top(self, window: int) -> npt.NDArray[np.int64]:
        """The slots scoring at or above the ``window``-th best score (ties included); their
        ranks are known from here on."""
        if window >= self.n:
            chosen = self.slots
        else:
            chosen = self.slots[self.values >= kernels.kth_largest(self.values, window)]
        values = self.scores_of(chosen)
        self.top_ids = np.array([self._ids[s] for s in chosen.tolist()]) if len(chosen) else np.array([], np.str_)
        order = np.lexsort((self.top_ids, -values)) if len(chosen) else _NO_ORDER
        self._top_rank = dict(zip(chosen[order].tolist(), range(1, len(chosen) + 1)))
        return chosen

    def scores_of(self, slots: npt.NDArray[np.int64]) -> FloatArray:
        """The channel's scores of ``slots`` (hits of the channel; ``self.slots`` is sorted)."""
        return self.values[np.searchsorted(self.slots, slots)]

    def ranks(self, slots: list[int], record_ids: list[str], values: FloatArray) -> list[int]:
        """The ranks of records (hits of this channel, at ``slots``) that score ``values``."""
        top = self._top_rank
        out = [top.get(slot, 0) for slot in slots]
        missing = [k for k, rank in enumerate(out) if not rank]
        if not missing:
            return out
        # Outside the window: #higher and #equal per distinct score asked, one compiled pass
        # over the channel (no sort of it); the tied records' ids only for scores shared.
        asked = values[missing]
        wanted, which = np.unique(asked, return_inverse=True)
        greater, equal, at = kernels.rank_counts(self.values, wanted)
        shared = equal > 1
        ties = self._ties
        if shared.any():
            for position in np.flatnonzero(shared).tolist():  # cached from a narrower window
                if float(wanted[position]) in ties:
                    shared[position] = False
            self._tie_ids(kernels.members(self.values, wanted, at, shared))
        for k, position, value in zip(missing, which.tolist(), asked.tolist()):
            rank = int(greater[position]) + 1
            if equal[position] > 1:
                rank += bisect_left(ties[value], record_ids[k])
            out[k] = rank
        return out

    def _tie_ids(self, tied: npt.NDArray[np.int64]) -> None:
        """Cache the sorted record ids of the hits at ``tied`` (indices into ``values``) per
        score."""
        ids, ties = self._ids, self._ties
        scores = self.values[tied].tolist()
        for value, slot in zip(scores, self.slots[tied].tolist()):
            group = ties.get(value)
            if group is None:
                group = ties[value] = []
            group.append(ids[slot])
        for value in set(scores):
            ties[value].sort()


_NO_ORDER = np.zeros(0, np.int64)


def top_k(channels: list[Channel], table: DocTable, now_ms: int, system_as_of: int, depth: int) -> TopK:
    """The exact first ``depth`` hits of :func:`search_service.ranking.rank` over ``channels``
    (lexical first, then semantic, as rank() takes them), for the records eligible at
    ``now_ms`` and accepted by ``system_as_of``."""
    if depth < 1:
        raise ValueError("depth must be positive")
    if not channels:
        raise ValueError("at least one channel")
    listed = channels[0].hits
    for channel in channels[1:]:
        listed = listed | channel.hits
    eligible, n = table.eligible(listed, now_ms, system_as_of)
    if n == 0:
        return TopK((), 0, 0)
    ids = table.ids
    ranks = [_Ranks(channel.hits, eligible, n, channel.scores, ids) for channel in channels]
    scale = (RRF_K + 1) / len(channels)
    window = max(_FIRST_WINDOW, 2 * depth)
    while True:
        # Every record in some channel's best `window`, with its exact rank in each channel
        # that lists it; a record in none is below `window` in every channel that lists it.
        tops = [channel_ranks.top(window) for channel_ranks in ranks]
        if len(tops) == 1:
            seen, seen_ids = tops[0], ranks[0].top_ids  # in slot order already
        else:
            seen = np.unique(np.concatenate(tops))
            seen_ids = np.array([ids[s] for s in seen.tolist()])
        # The same binary64 operations, in the same order, as rank(): 0.0 + 1/(60 + r) per
        # channel (lexical first), then the roundings (elementwise IEEE-754, no fused ops).
        totals = np.zeros(len(seen))
        for channel_ranks in ranks:
            listed = np.flatnonzero(channel_ranks.hit[seen])
            slots = seen[listed]
            positions = channel_ranks.ranks(slots.tolist(), seen_ids[listed].tolist(), channel_ranks.scores_of(slots))
            totals[listed] += 1.0 / (RRF_K + np.array(positions, np.int64))
        fresh = np.array([round_score(recency_from(start, now_ms)) for start in table.valid_from[seen].tolist()],
                         np.float64)
        fused = np.floor(np.minimum(1.0, totals * scale) * _SCALE + 0.5) / _SCALE
        score = np.floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
        order = np.lexsort((seen_ids, -fresh, -score))[:depth]
        unseen = 0.0  # the largest raw fusion sum of a record in no window
        for top, channel_ranks in zip(tops, ranks):
            if len(top) < channel_ranks.n:
                unseen += 1.0 / (RRF_K + len(top) + 1)
        if unseen == 0.0 or (len(order) == depth and float(score[order[-1]]) > _score(unseen * scale, 1.0)):
            make = tuple.__new__
            hits = tuple(
                make(RankedHit, (record_id, s, i, f, r))
                for i, (record_id, s, f, r) in enumerate(
                    zip(seen_ids[order].tolist(), score[order].tolist(), fused[order].tolist(), fresh[order].tolist()),
                    start=1)
            )
            return TopK(hits, n, len(seen))
        window = 4 * window


def _score(scaled: float, fresh: float) -> float:
    fused = math.floor(min(1.0, scaled) * _SCALE + 0.5) / _SCALE
    return math.floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
