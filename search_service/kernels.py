"""The search service's per-posting and per-slot loops, compiled (numba, nopython mode).

Each kernel performs the same IEEE-754 binary64 operations, in the same order, as the numpy
expression it replaces (named in its docstring): numba compiles without ``fastmath``, so LLVM
neither reorders nor contracts them into fused multiply-adds, and the results are bit for bit
those of numpy and of a scalar implementation (tests/search/test_kernels.py checks each
against its numpy form). What the compiled loop saves is numpy's temporaries: one pass over a
posting list instead of about ten.

``nogil``: a search in the service's thread pool does not hold the GIL while it scores, so the
pool's threads score on both cores. ``cache``: the machine code is written next to this file
(or under ``NUMBA_CACHE_DIR``) and reused by the next process; :func:`warm` compiles (or loads)
every signature the service uses, so that no search pays for it — the service calls it at
start, before it listens.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

_JIT = {"nogil": True, "cache": True, "fastmath": False, "error_model": "numpy"}


@numba.njit(**_JIT)
def accumulate(acc: npt.NDArray[np.float64], docs: npt.NDArray[np.int32], tfs: npt.NDArray[np.generic],
               factor: float, base: float, slope: float, lengths: npt.NDArray[np.int32], size: int) -> None:
    """``acc[docs] += factor * tf / (tf + base + slope * lengths[docs])`` for the postings whose
    slot is ``< size`` (``docs`` distinct; ``tf`` widened to binary64 first)."""
    for i in range(docs.shape[0]):
        doc = docs[i]
        if doc >= size:
            continue
        tf = np.float64(tfs[i])
        acc[doc] += factor * tf / (tf + base + slope * lengths[doc])


@numba.njit(**_JIT)
def eligible(listed: npt.NDArray[np.bool_], alive: npt.NDArray[np.bool_], accepted_at: npt.NDArray[np.int64],
             valid_from: npt.NDArray[np.int64], valid_to: npt.NDArray[np.int64], expires: npt.NDArray[np.int64],
             now_ms: int, system_as_of: int) -> tuple[npt.NDArray[np.bool_], int]:
    """The loop of :meth:`search_service.doctable.DocTable.eligible` (the rule is written there)."""
    out = np.zeros(listed.shape[0], np.bool_)
    count = 0
    for slot in range(listed.shape[0]):
        if (listed[slot] and alive[slot] and accepted_at[slot] <= system_as_of and valid_from[slot] <= now_ms
                and valid_to[slot] >= now_ms and expires[slot] > now_ms):
            out[slot] = True
            count += 1
    return out, count


@numba.njit(**_JIT)
def eligible_until(alive: npt.NDArray[np.bool_], accepted_at: npt.NDArray[np.int64],
                   valid_from: npt.NDArray[np.int64], valid_to: npt.NDArray[np.int64],
                   expires: npt.NDArray[np.int64], size: int, now_ms: int,
                   open_value: int) -> tuple[npt.NDArray[np.bool_], int]:
    """The slots ``< size`` that :func:`eligible` admits at ``now_ms`` for every listed slot
    and any pin at or after every ``accepted_at``, and the first instant after ``now_ms`` at
    which that set can change (``open_value``: never): a record's window opens at its
    ``valid_from`` and closes after its ``valid_to`` or at its ``expires``."""
    out = np.zeros(size, np.bool_)
    until = open_value
    for slot in range(size):
        if not alive[slot]:
            continue
        start, end, gone = valid_from[slot], valid_to[slot], expires[slot]
        if start > now_ms:
            until = min(until, start)
        if end >= now_ms and end != open_value:
            until = min(until, end + 1)
        if gone > now_ms:
            until = min(until, gone)
        out[slot] = start <= now_ms and end >= now_ms and gone > now_ms
    return out, until


@numba.njit(**_JIT)
def listed_in(listed: npt.NDArray[np.bool_], window: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.bool_], int]:
    """``listed & window`` over ``window``'s slots and how many are set (``listed`` may be longer)."""
    out = np.zeros(listed.shape[0], np.bool_)
    count = 0
    for slot in range(window.shape[0]):
        if listed[slot] and window[slot]:
            out[slot] = True
            count += 1
    return out, count


@numba.njit(**_JIT)
def hits_of(hits: npt.NDArray[np.bool_], eligible: npt.NDArray[np.bool_], scores: npt.NDArray[np.float64],
            count: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.float64], bool]:
    """``mask = hits & eligible``, its slots (ascending), their scores, and whether every one
    of those is finite; ``count`` bounds how many there are (the eligible count)."""
    mask = np.zeros(hits.shape[0], np.bool_)
    slots = np.empty(count, np.int64)
    values = np.empty(count, np.float64)
    n = 0
    finite = True
    for slot in range(hits.shape[0]):
        if hits[slot] and eligible[slot]:
            mask[slot] = True
            value = scores[slot]
            if not np.isfinite(value):
                finite = False
            slots[n] = slot
            values[n] = value
            n += 1
    return mask, slots[:n], values[:n], finite


@numba.njit(**_JIT)
def kth_largest(values: npt.NDArray[np.float64], k: int) -> float:
    """The ``k``-th largest of ``values`` (1 <= k <= len), counting repeats (the value of
    ``np.partition(values, len - k)[len - k]``): a min-heap of the best ``k`` seen."""
    heap = values[:k].copy()
    # heapify (min at the root)
    for start in range(k // 2 - 1, -1, -1):
        _sift_down(heap, start, k)
    for i in range(k, values.shape[0]):
        value = values[i]
        if value > heap[0]:
            heap[0] = value
            _sift_down(heap, 0, k)
    return heap[0]


@numba.njit(**_JIT)
def _sift_down(heap: npt.NDArray[np.float64], start: int, size: int) -> None:
    position = start
    value = heap[position]
    while True:
        child = 2 * position + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= value:
            break
        heap[position] = heap[child]
        position = child
    heap[position] = value


@numba.njit(**_JIT)
def rank_counts(values: npt.NDArray[np.float64], wanted: npt.NDArray[np.float64]
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per value ``w`` of ``wanted`` (ascending, distinct, finite): how many ``values`` are
    greater than ``w`` and how many equal it (``(values > w).sum()``, ``(values == w).sum()``),
    in one pass over ``values`` (no sort of them), and each value's :func:`positions` (for
    :func:`members`)."""
    m = wanted.shape[0]
    above = np.zeros(m + 1, np.int64)  # above[i]: values with exactly i entries of wanted below
    equal = np.zeros(m, np.int64)
    at = positions(values, wanted)
    for i in range(values.shape[0]):
        position = at[i]
        if position < m and wanted[position] == values[i]:
            equal[position] += 1
        above[position] += 1
    greater = np.zeros(m, np.int64)
    running = 0
    for j in range(m - 1, -1, -1):
        running += above[j + 1]
        greater[j] = running
    return greater, equal, at


@numba.njit(**_JIT)
def members(values: npt.NDArray[np.float64], wanted: npt.NDArray[np.float64], at: npt.NDArray[np.int64],
            chosen: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """The indices (ascending) of the ``values`` equal to a ``chosen`` entry of ``wanted``
    (ascending, distinct, finite), given their ``at = positions(values, wanted)``:
    ``np.flatnonzero(np.isin(values, wanted[chosen]))``."""
    out = np.empty(values.shape[0], np.int64)
    n = 0
    m = wanted.shape[0]
    for i in range(values.shape[0]):
        position = at[i]
        if position < m and chosen[position] and wanted[position] == values[i]:
            out[n] = i
            n += 1
    return out[:n]


@numba.njit(**_JIT)
def positions(values: npt.NDArray[np.float64], wanted: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Per value, how many of ``wanted`` (ascending, finite) are smaller:
    ``np.searchsorted(wanted, values, 'left')``.

    A binary search of all ``m`` costs ~40 ns a value (dependent, mispredicted loads), more
    than sorting the values. Instead a table over ``[wanted[0], wanted[-1]]`` in ``8m`` equal
    buckets: ``table[b]`` is how many entries fall in buckets ``< b``. Bucketing is monotone
    (a subtraction, a product by a constant >= 0 and truncation are monotone in binary64), so
    for a value in bucket ``b`` every entry of a lower bucket is smaller and every entry of a
    higher one is larger: its answer lies in ``[table[b], table[b + 1]]``, a range of about
    one entry, searched by bisection (exact whatever the spread; ~6 ns a value)."""
    m = wanted.shape[0]
    out = np.zeros(values.shape[0], np.int64)
    if m == 0:
        return out
    low, high = wanted[0], wanted[m - 1]
    buckets = 8 * m
    span = high - low
    scale = buckets / span if 0.0 < span < np.inf else 0.0
    if not np.isfinite(scale):
        scale = 0.0  # a subnormal span (or an overflowing one): one bucket, plain bisection
    table = np.zeros(buckets + 1, np.int64)
    for j in range(m):
        bucket = int((wanted[j] - low) * scale) if scale != 0.0 else 0
        table[min(bucket, buckets - 1) + 1] += 1
    for b in range(1, buckets + 1):
        table[b] += table[b - 1]
    for i in range(values.shape[0]):
        value = values[i]
        if value < low:
            continue
        if value > high:
            out[i] = m
            continue
        # scale 0: value - low may be infinite, and infinity times 0 is NaN
        bucket = min(int((value - low) * scale), buckets - 1) if scale != 0.0 else 0
        lo, hi = table[bucket], table[bucket + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if wanted[mid] < value:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo
    return out


@numba.njit(**_JIT)
def recency(valid_from: npt.NDArray[np.int64], now_ms: int, base: float, half_life_ms: int,
            scale: float) -> npt.NDArray[np.float64]:
    """Per record valid from ``valid_from[i]``, its rounded recency at ``now_ms``:
    ``floor(base ** (max(0, now_ms - v) / half_life_ms) * scale + 0.5) / scale``, as
    ``round_score(recency_from(v, now_ms))`` computes it for ``base`` 0.5 (the age and the half
    life are exact in binary64 below 2**53 ms, so the quotient is Python's correctly rounded
    ``int / int``; the power is the C library's ``pow``, as Python's ``**`` calls it). ``base``
    is an argument, not a constant, so that LLVM cannot turn ``pow(0.5, x)`` into ``exp2(-x)``."""
    out = np.empty(valid_from.shape[0], np.float64)
    for i in range(valid_from.shape[0]):
        age = now_ms - valid_from[i]
        if age < 0:
            age = 0
        out[i] = np.floor(base ** (np.float64(age) / np.float64(half_life_ms)) * scale + 0.5) / scale
    return out


def warm() -> None:
    """Compile (or load from the cache) every signature the service calls, on tiny inputs."""
    acc = np.zeros(4, np.float64)
    lengths = np.ones(4, np.int32)
    docs = np.array([0, 2], np.int32)
    for dtype in (np.uint8, np.uint16, np.int32, np.float64):
        accumulate(acc, docs, np.ones(2, dtype), 1.0, 0.3, 0.9, lengths, 4)
    listed = np.ones(4, np.bool_)
    column = np.zeros(4, np.int64)
    mask, count = eligible(listed, listed, column, column, column, column + 1, 0, 0)
    window, _ = eligible_until(listed, column, column, column, column + 1, 4, 0, int(np.iinfo(np.int64).max))
    listed_in(listed, window)
    _, _, values, _ = hits_of(listed, mask, acc, count)
    kth_largest(values, 1)
    _, equal, at = rank_counts(values, values[:1])
    members(values, values[:1], at, equal > 1)
    recency(column, 0, 0.5, 1, 1e12)
