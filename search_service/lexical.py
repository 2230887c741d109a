"""The in-memory lexical channel of profile ``engram-hybrid/v2``: BM25 over weighted fields,
each field indexed twice (exact and Snowball-stemmed tokens, SPEC §9).

One :class:`LexicalIndex` holds one scope, analysed in the scope's language, over the slot
numbers of the scope's :class:`~search_service.doctable.DocTable`. Each (copy, field) keeps a
posting list per term as one growable C array of ``(slot, tf)`` int32 pairs; a query scores
them with vectorised numpy arithmetic into a dense vector over the slots. The element-wise
operations are the same IEEE-754 binary64 operations, in the same order per document, as the
formula in docs/ranking.md, so scores are bit for bit those of a scalar implementation.

``add`` costs O(tokens of the document); ``remove`` re-analyses the document's fields (the
caller hands them again: the index keeps no text) to take it out of the statistics (kept as integer sums, so an index built by any sequence of adds
and removes scores exactly like one built fresh from the survivors) and leaves its postings in
place, masked by the table's ``alive`` column, until :meth:`LexicalIndex.remap` drops them when
the table compacts. :class:`Index` is the seam for another engine.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections import Counter
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from search_service.analyzer import DEFAULT_LANGUAGE, Analyzer, analyzer_for

FIELDS = ("primary", "decision", "evidence", "context", "citations")
FIELD_WEIGHTS: Mapping[str, float] = {
    "primary": 3.0,
    "decision": 2.0,
    "evidence": 1.5,
    "context": 1.0,
    "citations": 0.5,
}
# The two copies of every field; a stemmed match counts with this weight on top of the field's.
COPIES = ("exact", "stemmed")
COPY_WEIGHTS: Mapping[str, float] = {"exact": 1.0, "stemmed": 1.0}
K1 = 1.2
B = 0.75
_KINDS = ("decision", "evidence", "context")
# (copy, field) lanes, copy-major: lane = copy * len(FIELDS) + field.
_LANES = tuple((c, f) for c in range(len(COPIES)) for f in range(len(FIELDS)))
_LANE_WEIGHTS = tuple(COPY_WEIGHTS[COPIES[c]] * FIELD_WEIGHTS[FIELDS[f]] for c, f in _LANES)
_INITIAL = 1024

_ENGINE_CONFIG: Mapping[str, object] = {
    "engine": "engram-bm25f/np-3",
    "fields": list(FIELDS),
    "field_weights": dict(FIELD_WEIGHTS),
    "copies": list(COPIES),
    "copy_weights": dict(COPY_WEIGHTS),
    "field_sources": {
        "primary": "text of the component named by primary_component_id",
        "decision": "texts of the other components of kind decision, joined by LF",
        "evidence": "texts of the other components of kind evidence, joined by LF",
        "context": "texts of the other components of kind context, joined by LF",
        "citations": "source_ref of every citation, joined by LF",
    },
    "k1": K1,
    "b": B,
    "idf": "per copy c: ln(1 + (N - df_c + 0.5) / (df_c + 0.5)); N = documents in the scope's index, "
    "df_c = documents containing the term in at least one field of copy c",
    "score": "sum over copies c (exact: the query's exact tokens; stemmed: their stems), over query "
    "terms t of that copy, each counted as often as it occurs in the query, and over fields f with "
    "tf_cf > 0 of idf_c(t) * w_c * w_f * tf_cf * (k1 + 1) / (tf_cf + k1 * (1 - b + b * len_cf / avglen_cf)); "
    "len_cf = tokens of field f's copy c in the document, avglen_cf = tokens of that field copy in all "
    "documents / N",
    "matching": "every document containing at least one query term in any field copy; never truncated",
    "arithmetic": "IEEE-754 binary64; per document, parts added in lane order (copy-major: exact then "
    "stemmed; fields in the order above), then query terms in code-point order",
}


def lexical_profile_config(language: str = DEFAULT_LANGUAGE) -> Mapping[str, object]:
    """The lexical channel's part of the ranking profile config for a scope language."""
    return {**_ENGINE_CONFIG, "analyzer": dict(analyzer_for(language).config())}


LEXICAL_PROFILE_CONFIG = lexical_profile_config()


def fields_of(record: Mapping[str, object]) -> dict[str, str]:
    """The five search fields of a record (or capture payload) dict.

    The primary component is indexed once, in ``primary`` only; the kind fields hold the
    other components of that kind in payload order.
    """
    primary_id = record["primary_component_id"]
    primary: str | None = None
    by_kind: dict[str, list[str]] = {kind: [] for kind in _KINDS}
    for component in record["components"]:  # type: ignore[attr-defined]
        if component["component_id"] == primary_id and primary is None:
            primary = component["text"]
            continue
        kind = component["kind"]
        if kind not in by_kind:
            raise ValueError("unknown component kind")
        by_kind[kind].append(component["text"])
    if primary is None:
        raise ValueError("primary component not found")
    citations = record.get("citations", ())  # type: ignore[attr-defined]
    fields = {"primary": primary}
    fields.update({kind: "\n".join(texts) for kind, texts in by_kind.items()})
    fields["citations"] = "\n".join(citation["source_ref"] for citation in citations)
    return fields


FloatArray = npt.NDArray[np.float64]


@runtime_checkable
class Index(Protocol):
    """What the search service needs from a per-scope lexical engine over table slots."""

    @property
    def language(self) -> str: ...

    def profile_config(self) -> Mapping[str, object]: ...

    def add(self, slot: int, fields: Mapping[str, str]) -> None: ...

    def remove(self, slot: int, fields: Mapping[str, str]) -> bool: ...

    def __len__(self) -> int: ...

    def scores(self, query: str, size: int) -> FloatArray: ...

    def remap(self, remap: npt.NDArray[np.int64], size: int) -> None: ...

    def nbytes(self) -> int: ...


class LexicalIndex:
    """BM25 over the five weighted fields in two copies, one instance per scope. Not
    thread-safe: one writer or one reader at a time (the projection's lock)."""

    __slots__ = ("_analyzer", "_config", "_postings", "_lengths", "_total_lengths", "_df", "_indexed", "_live",
                 "_posting_bytes")

    def __init__(self, language: str = DEFAULT_LANGUAGE) -> None:
        self._analyzer: Analyzer = analyzer_for(language)
        self._config = lexical_profile_config(language)
        # _postings[lane][term] = array('i') of (slot, tf) pairs, slots ascending
        self._postings: tuple[dict[str, array[int]], ...] = tuple({} for _ in _LANES)
        # _lengths[lane, slot] = token count of that field copy of the document
        self._lengths = np.zeros((len(_LANES), _INITIAL), np.int32)
        self._total_lengths = [0] * len(_LANES)
        # _df[copy][term] = live documents with the term in any field of that copy
        self._df: tuple[dict[str, int], ...] = tuple({} for _ in COPIES)
        # _indexed[slot] = 1 while the slot's document is in the statistics
        self._indexed = bytearray()
        self._live = 0
        self._posting_bytes = 0

    @property
    def language(self) -> str:
        return self._analyzer.language

    def profile_config(self) -> Mapping[str, object]:
        """The engine's part of the ranking profile config (hashed into the rank receipt)."""
        return self._config

    def __len__(self) -> int:
        return self._live

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and 0 <= slot < len(self._indexed) and self._indexed[slot] == 1

    def _analyse(self, fields: Mapping[str, str]) -> list[Counter[str]]:
        """Term counts per lane."""
        if set(fields) - set(FIELDS):
            raise ValueError("unknown search field")
        counts: list[Counter[str]] = [Counter() for _ in _LANES]
        for f, name in enumerate(FIELDS):
            exact = self._analyzer.exact(fields.get(name, ""))
            counts[f] = Counter(exact)
            if exact and self._analyzer.stems:
                counts[len(FIELDS) + f] = Counter(self._analyzer.stemmed(exact))
        return counts

    def add(self, slot: int, fields: Mapping[str, str]) -> None:
        """Index the document of a new table slot. Missing fields are empty."""
        if slot in self:
            raise ValueError("slot already indexed")
        lanes = self._analyse(fields)
        if slot >= self._lengths.shape[1]:
            grown = np.zeros((len(_LANES), max(2 * self._lengths.shape[1], slot + 1)), np.int32)
            grown[:, : self._lengths.shape[1]] = self._lengths
            self._lengths = grown
        seen: tuple[set[str], ...] = tuple(set() for _ in COPIES)
        intern = sys.intern
        for lane, counts in enumerate(lanes):
            if not counts:
                continue
            postings = self._postings[lane]
            for term, tf in counts.items():
                pairs = postings.get(term)
                if pairs is None:
                    pairs = postings[intern(term)] = array("i")
                pairs.append(slot)
                pairs.append(tf)
            self._posting_bytes += 8 * len(counts)
            length = sum(counts.values())
            self._lengths[lane, slot] = length
            self._total_lengths[lane] += length
            seen[_LANES[lane][0]].update(counts)
        for c, copy_terms in enumerate(seen):
            df = self._df[c]
            for term in copy_terms:
                df[term] = df.get(term, 0) + 1
        if slot >= len(self._indexed):
            self._indexed.extend(bytes(max(len(self._indexed), slot + 1 - len(self._indexed))))
        self._indexed[slot] = 1
        self._live += 1

    def remove(self, slot: int, fields: Mapping[str, str]) -> bool:
        """Take a document out of the statistics; ``fields`` must be the ones it was added
        with. Returns whether it was indexed. Its postings stay (the caller masks dead slots)
        until :meth:`remap`."""
        if slot not in self:
            return False
        lanes = self._analyse(fields)
        self._indexed[slot] = 0
        self._live -= 1
        seen: tuple[set[str], ...] = tuple(set() for _ in COPIES)
        for lane, counts in enumerate(lanes):
            self._total_lengths[lane] -= sum(counts.values())
            seen[_LANES[lane][0]].update(counts)
        for c, copy_terms in enumerate(seen):
            df_c = self._df[c]
            for term in copy_terms:
                df = df_c[term] - 1
                if df:
                    df_c[term] = df
                else:
                    del df_c[term]
        return True

    def scores(self, query: str, size: int) -> FloatArray:
        """The BM25 score of every slot ``< size`` (0.0 where nothing matches). Dead slots may
        carry a score: mask them with the table."""
        acc = np.zeros(size, np.float64)
        n = self._live
        exact = self._analyzer.exact(query)
        if n == 0 or not exact:
            return acc
        stemmed = self._analyzer.stemmed(exact)
        query_terms = (Counter(exact), Counter(stemmed))
        base = K1 * (1.0 - B)
        for lane, (c, f) in enumerate(_LANES):
            total = self._total_lengths[lane]
            if not total:
                continue
            postings, lengths = self._postings[lane], self._lengths[lane]
            slope = K1 * B * n / total
            for term in sorted(query_terms[c]):
                pairs = postings.get(term)
                df = self._df[c].get(term, 0)
                if pairs is None or not df:
                    continue
                idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
                factor = query_terms[c][term] * idf * _LANE_WEIGHTS[lane] * (K1 + 1.0)
                view = np.frombuffer(pairs, np.int32).reshape(-1, 2)
                docs = view[:, 0]
                if docs[-1] >= size:
                    keep = docs < size
                    view = view[keep]
                    docs = view[:, 0]
                tf = view[:, 1].astype(np.float64)
                acc[docs] += factor * tf / (tf + base + slope * lengths[docs])
                del view, docs
        return acc

    def remap(self, remap: npt.NDArray[np.int64], size: int) -> None:
        """Renumber after the table compacted: ``remap[old] = new`` (-1: dead, dropped)."""
        kept = 0
        for postings in self._postings:
            for term in list(postings):
                view = np.frombuffer(postings[term], np.int32).reshape(-1, 2)
                new = remap[view[:, 0]]
                keep = new >= 0
                if not keep.any():
                    del view
                    del postings[term]
                    continue
                pairs = np.empty((int(keep.sum()), 2), np.int32)
                pairs[:, 0] = new[keep]
                pairs[:, 1] = view[keep, 1]
                del view
                fresh = array("i")
                fresh.frombytes(pairs.tobytes())
                postings[term] = fresh
                kept += pairs.nbytes
        old = self._lengths
        lengths = np.zeros((len(_LANES), max(_INITIAL, 2 * size)), np.int32)
        live = np.flatnonzero(remap >= 0)
        lengths[:, remap[live]] = old[:, live]
        self._lengths = lengths
        indexed = bytearray(max(_INITIAL, 2 * size))
        for slot in np.flatnonzero(np.frombuffer(bytes(self._indexed), np.uint8)[: len(remap)]).tolist():
            if remap[slot] >= 0:
                indexed[int(remap[slot])] = 1
        self._indexed = indexed
        self._posting_bytes = kept

    def nbytes(self) -> int:
        """Bytes of the posting pairs (dead ones included until a remap) and the length
        columns; not the Python objects around them. O(1)."""
        return self._posting_bytes + self._lengths.nbytes + len(self._indexed)
