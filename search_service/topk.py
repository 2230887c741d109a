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
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from search_service import kernels
from search_service.doctable import DocTable
from search_service.ranking import FUSED_WEIGHT, HALF_LIFE_MS, RECENCY_BASE, RECENCY_WEIGHT, RRF_K, RankedHit

_SCALE = 1e12
_FIRST_WINDOW = 64

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
KeyArray = npt.NDArray[np.bytes_]


class Hits(Sequence[RankedHit]):
    """Ranked hits in final order (rank = position + 1), made :class:`RankedHit` only where
    read: a search pins ``depth`` of them (200) and a page shows about ten. ``ids``: every
    hit's record id, in order (the ordered-ids digest and the removal checks read only them).
    Equal to any sequence of the same RankedHits."""

    __slots__ = ("ids", "_scores", "_fused", "_recency")

    def __init__(self, ids: list[str], scores: FloatArray, fused: FloatArray, recency: FloatArray) -> None:
        if not len(ids) == len(scores) == len(fused) == len(recency):
            raise ValueError("one score, fused value and recency per hit")
        self.ids = ids
        self._scores, self._fused, self._recency = scores, fused, recency

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> RankedHit: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[RankedHit, ...]: ...

    def __getitem__(self, index: int | slice) -> RankedHit | tuple[RankedHit, ...]:
        if isinstance(index, slice):
            return tuple(self._hit(i) for i in range(*index.indices(len(self.ids))))
        i = operator.index(index)
        if i < 0:
            i += len(self.ids)
        if not 0 <= i < len(self.ids):
            raise IndexError("hit index out of range")
        return self._hit(i)

    def _hit(self, i: int) -> RankedHit:
        return tuple.__new__(RankedHit, (self.ids[i], float(self._scores[i]), i + 1, float(self._fused[i]),
                                         float(self._recency[i])))

    def __iter__(self) -> Iterator[RankedHit]:
        return (self._hit(i) for i in range(len(self.ids)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Hits({list(self)!r})"


_NO_HITS = Hits([], np.zeros(0), np.zeros(0), np.zeros(0))


@dataclass(frozen=True, slots=True)
class TopK:
    """``hits``: the best ``depth`` eligible records in final order. ``candidates``: how many
    eligible records matched in any channel (all were ranked; only the best are listed).
    ``examined``: how many records had to be looked at (a cost figure)."""

    hits: Hits
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
    over the channel's scores, made only then. Record ids are compared as the table's UTF-8
    ``keys`` (the same order), all in numpy."""

    __slots__ = ("hit", "slots", "values", "n", "_keys", "_window_slots", "_window_ranks", "top_keys")

    def __init__(self, hits: BoolArray, eligible: BoolArray, count: int, scores: FloatArray, keys: KeyArray) -> None:
        self.hit, self.slots, self.values, finite = kernels.hits_of(hits, eligible, scores, count)
        if not finite:
            raise ValueError("channel scores must be finite")
        self.n = len(self.slots)
        self._keys = keys
        # The last top()'s slots (ascending) and their ranks.
        self._window_slots: IntArray = _NO_ORDER
        self._window_ranks: IntArray = _NO_ORDER
        # The keys of the last top()'s slots (in slot order).
        self.top_keys: KeyArray = keys[:0]

    def top(self, window: int) -> IntArray:
        """The slots scoring at or above the ``window``-th best score (ties included), in slot
        order; their ranks are known from here on."""
        if window >= self.n:
            chosen = self.slots
        else:
            chosen = self.slots[self.values >= kth_largest(self.values, window)]
        keys = self._keys[chosen]
        order = np.lexsort((keys, -self.scores_of(chosen)))
        ranks = np.empty(len(chosen), np.int64)
        ranks[order] = np.arange(1, len(chosen) + 1, dtype=np.int64)
        self._window_slots, self._window_ranks, self.top_keys = chosen, ranks, keys
        return chosen

    def scores_of(self, slots: IntArray) -> FloatArray:
        """The channel's scores of ``slots`` (hits of the channel; ``self.slots`` is sorted)."""
        return self.values[np.searchsorted(self.slots, slots)]

    def ranks(self, slots: IntArray, keys: KeyArray, values: FloatArray) -> IntArray:
        """The ranks of records (hits of this channel, at ``slots``, with record-id ``keys``)
        that score ``values``."""
        out = np.zeros(len(slots), np.int64)
        window = self._window_slots
        if len(window):
            at_window = np.minimum(np.searchsorted(window, slots), len(window) - 1)
            inside = window[at_window] == slots
            out[inside] = self._window_ranks[at_window[inside]]
            missing = np.flatnonzero(~inside)
        else:
            missing = np.arange(len(slots))
        if not len(missing):
            return out
        # Outside the window: #higher and #equal per distinct score asked, one compiled pass
        # over the channel (no sort of it); the tied records' keys only for scores shared.
        wanted, which = np.unique(values[missing], return_inverse=True)
        greater, equal, at = kernels.rank_counts(self.values, wanted)
        out[missing] = greater[which] + 1
        shared = equal > 1
        if not shared.any():
            return out
        # + #(equal with a smaller record_id), per shared score: its hits' keys (one compiled
        # pass finds them) compared with the asking records' keys. No sort of the ties: a
        # long tie is compared with the few records that ask, a sort only when both are many.
        members = kernels.members(self.values, wanted, at, shared)
        member_groups = at[members]
        by_member = np.argsort(member_groups, kind="stable")
        members, member_groups = members[by_member], member_groups[by_member]
        asking_tied = shared[which]
        tied, groups = missing[asking_tied], which[asking_tied]
        by_group = np.argsort(groups, kind="stable")
        tied, groups = tied[by_group], groups[by_group]
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        lo = np.searchsorted(member_groups, groups[starts], side="left")
        hi = np.searchsorted(member_groups, groups[starts], side="right")
        for a, b, m0, m1 in zip(starts.tolist(), np.r_[starts[1:], len(groups)].tolist(), lo.tolist(), hi.tolist()):
            asking = keys[tied[a:b]]
            tie_keys = self._keys[self.slots[members[m0:m1]]]
            if len(tie_keys) * len(asking) <= _BROADCAST_LIMIT:
                out[tied[a:b]] += (tie_keys[None, :] < asking[:, None]).sum(axis=1)
            else:
                out[tied[a:b]] += np.searchsorted(np.sort(tie_keys), asking, side="left")
        return out


def kth_largest(values: FloatArray, k: int) -> float:
    """The ``k``-th largest of ``values`` (``1 <= k < len``), counting repeats: the value of
    ``np.partition(values, len - k)[len - k]``.

    A threshold from a sample (every ``_SAMPLE_STEP``-th value's ``k / step + 4``-th largest)
    keeps about ``k + 128`` values; when at least ``k`` reach it, the ``k`` largest are all
    among them, and a heap over those finds the ``k``-th (at 100k values and ``k`` = 400:
    ~50 µs, against ~210 µs for the heap over every value, and ~4.7 ms for it over ascending
    values, its worst case). Otherwise an introselect over every value (``np.partition``,
    O(n) whatever the order) answers."""
    n = len(values)
    sample = values[::_SAMPLE_STEP]
    want = k // _SAMPLE_STEP + 4
    if want < len(sample):
        threshold = np.partition(sample, len(sample) - want)[len(sample) - want]
        above = values[values >= threshold]
        if len(above) >= k:
            return float(kernels.kth_largest(above, k))
    return float(np.partition(values, n - k)[n - k])


_SAMPLE_STEP = 32
# Key comparisons one tie may make at once (a bool matrix of this many entries).
_BROADCAST_LIMIT = 1 << 20
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
        return TopK(_NO_HITS, 0, 0)
    ids, keys = table.ids, table.keys
    ranks = [_Ranks(channel.hits, eligible, n, channel.scores, keys) for channel in channels]
    scale = (RRF_K + 1) / len(channels)
    window = max(_FIRST_WINDOW, 2 * depth)
    while True:
        # Every record in some channel's best `window`, with its exact rank in each channel
        # that lists it; a record in none is below `window` in every channel that lists it.
        tops = [channel_ranks.top(window) for channel_ranks in ranks]
        if len(tops) == 1:
            seen, seen_keys = tops[0], ranks[0].top_keys  # in slot order already
        else:
            seen = np.unique(np.concatenate(tops))
            seen_keys = keys[seen]
        # The same binary64 operations, in the same order, as rank(): 0.0 + 1/(60 + r) per
        # channel (lexical first), then the roundings (elementwise IEEE-754, no fused ops).
        totals = np.zeros(len(seen))
        for channel_ranks in ranks:
            listed = np.flatnonzero(channel_ranks.hit[seen])
            slots = seen[listed]
            positions = channel_ranks.ranks(slots, seen_keys[listed], channel_ranks.scores_of(slots))
            totals[listed] += 1.0 / (RRF_K + positions)
        fresh = kernels.recency(table.valid_from[seen], now_ms, RECENCY_BASE, HALF_LIFE_MS, _SCALE)
        fused = np.floor(np.minimum(1.0, totals * scale) * _SCALE + 0.5) / _SCALE
        score = np.floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
        order = np.lexsort((seen_keys, -fresh, -score))[:depth]
        unseen = 0.0  # the largest raw fusion sum of a record in no window
        for top, channel_ranks in zip(tops, ranks):
            if len(top) < channel_ranks.n:
                unseen += 1.0 / (RRF_K + len(top) + 1)
        if unseen == 0.0 or (len(order) == depth and float(score[order[-1]]) > _score(unseen * scale, 1.0)):
            hits = Hits([ids[s] for s in seen[order].tolist()], score[order], fused[order], fresh[order])
            return TopK(hits, n, len(seen))
        window = 4 * window


def _score(scaled: float, fresh: float) -> float:
    fused = math.floor(min(1.0, scaled) * _SCALE + 0.5) / _SCALE
    return math.floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
