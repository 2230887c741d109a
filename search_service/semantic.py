"""The semantic channel's per-scope vector index (SPEC §9): every window vector of every record
in one contiguous float32 matrix, searched exactly (cosine = dot product of unit vectors).

The rows of a record are contiguous and records are appended in slot order (the
:class:`~search_service.doctable.DocTable` hands out slots in increasing order), so a record's
similarity — the best of its windows — is one ``maximum.reduceat`` over the query's dot
products. A removed record's rows are zeroed at once (its vectors are derived from its
plaintext: nothing of a forgotten record stays readable until the next compaction), and a
compaction drops them.

The vectors live only here, in the search projection, where the plaintext lives too; they are
never sent to storage.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from search_service.embedding import DIMENSIONS, Vectors

_INITIAL_ROWS = 1024
_INITIAL_SLOTS = 1024
MIN_SIMILARITY = 0.35
"""A record is a semantic hit when its best window's cosine to the query is above this: the
channel lists related records, not every record of the scope. Chosen on the quality bench
(bench/quality_bench.py, docs/ranking.md): from 0.0 to 0.35 Semanlink nDCG@10 stays at
0.520-0.521 while the LongMemEval subset's rises from 0.884 to 0.925 (a weak semantic rank no
longer pulls a lexical hit down); above 0.4 Semanlink loses (0.494 at 0.5)."""

FloatArray = npt.NDArray[np.float64]


def record_text(record: Mapping[str, object]) -> str:
    """What the channel embeds for a record: the primary component's text, then the other
    components' texts in payload order, one per line (citations are references, not text)."""
    primary_id = record["primary_component_id"]
    components = record["components"]
    assert isinstance(components, list)
    primary = [c["text"] for c in components if c["component_id"] == primary_id][:1]
    rest = [c["text"] for c in components if c["component_id"] != primary_id]
    return "\n".join(primary + rest)


class VectorIndex:
    """Window vectors of one scope's records, by table slot. Not thread-safe (the projection's
    lock guards it)."""

    __slots__ = ("_matrix", "_rows", "_first", "_count", "_slots")

    def __init__(self) -> None:
        self._matrix = np.zeros((_INITIAL_ROWS, DIMENSIONS), np.float32)
        self._rows = 0
        self._first = np.zeros(_INITIAL_SLOTS, np.int64)  # first row of each slot
        self._count = np.zeros(_INITIAL_SLOTS, np.int32)  # windows of each slot
        self._slots = 0

    @property
    def rows(self) -> int:
        """Window rows held (live and zeroed)."""
        return self._rows

    @property
    def slots(self) -> int:
        return self._slots

    def add(self, slot: int, vectors: Vectors) -> None:
        """The windows of the record in ``slot``, which must be the next slot of the table."""
        if slot != self._slots:
            raise ValueError("vectors must be added in slot order")
        if vectors.ndim != 2 or vectors.shape[1] != DIMENSIONS or len(vectors) == 0:
            raise ValueError("one or more window vectors of the model's dimensions")
        count = len(vectors)
        if self._rows + count > len(self._matrix):
            self._matrix = _grown(self._matrix, max(_next_capacity(len(self._matrix)), self._rows + count))
        if slot == len(self._first):
            self._first = _grown(self._first, 2 * slot)
            self._count = _grown(self._count, 2 * slot)
        self._matrix[self._rows:self._rows + count] = vectors
        self._first[slot] = self._rows
        self._count[slot] = count
        self._rows += count
        self._slots += 1

    def trim(self) -> None:
        """Drop the matrix's unused capacity (after a build: growth by doubling leaves up to
        half of it empty)."""
        if len(self._matrix) > self._rows + _INITIAL_ROWS:
            self._matrix = self._matrix[: self._rows + _INITIAL_ROWS].copy()

    def remove(self, slot: int) -> None:
        """Zero the slot's rows (the slot stays, scoring 0, until a compaction)."""
        first = int(self._first[slot])
        self._matrix[first:first + int(self._count[slot])] = 0.0

    def vectors(self, slot: int) -> Vectors:
        """The rows held for ``slot`` (a copy)."""
        first = int(self._first[slot])
        return self._matrix[first:first + int(self._count[slot])].copy()

    def similarities(self, query: Vectors, size: int) -> FloatArray:
        """Per table slot (``size`` = the table's slots), the best window's cosine to the unit
        vector ``query`` (float32 products, widened)."""
        if size != self._slots:
            raise ValueError("vector index out of step with the table")
        if size == 0:
            return np.zeros(0, np.float64)
        products = self._matrix[: self._rows] @ query
        return np.maximum.reduceat(products, self._first[:size]).astype(np.float64)

    def remap(self, remap: npt.NDArray[np.int64], size: int) -> None:
        """Follow :meth:`DocTable.compact`: keep the rows of surviving slots, renumbered."""
        keep = np.flatnonzero(remap[: self._slots] >= 0)
        counts = self._count[keep]
        rows = np.repeat(self._first[keep], counts) + _ranges(counts)
        matrix = np.zeros((max(_INITIAL_ROWS, 2 * len(rows)), DIMENSIONS), np.float32)
        matrix[: len(rows)] = self._matrix[rows]
        first = np.zeros(max(_INITIAL_SLOTS, 2 * size), np.int64)
        count = np.zeros(len(first), np.int32)
        if len(keep):
            first[1:len(keep)] = np.cumsum(counts)[:-1]
        count[: len(keep)] = counts
        if len(keep) != size:
            raise ValueError("vector index out of step with the table")
        self._matrix, self._first, self._count = matrix, first, count
        self._rows, self._slots = len(rows), size

    def nbytes(self) -> int:
        """Bytes of the matrix (capacity) and the slot columns."""
        return self._matrix.nbytes + self._first.nbytes + self._count.nbytes

    @staticmethod
    def config() -> Mapping[str, object]:
        """The index's part of the semantic channel's profile config."""
        return {
            "index": "exact: one contiguous float32 matrix of window vectors per scope",
            "similarity": "max over the record's windows of the dot product of unit vectors (cosine)",
            "hit": f"best-window cosine > {MIN_SIMILARITY}",
        }


def _next_capacity(rows: int) -> int:
    """Double while small, then grow by a quarter (a copy of a large matrix is a pause, and
    doubling would leave up to half of it unused)."""
    return 2 * rows if rows < 65_536 else rows + rows // 4


def _grown(column: npt.NDArray[np.generic], capacity: int) -> npt.NDArray[np.generic]:
    fresh = np.zeros((capacity, *column.shape[1:]), column.dtype)
    fresh[: len(column)] = column
    return fresh


def _ranges(counts: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
    """``[0..c0), [0..c1), …`` concatenated."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts
