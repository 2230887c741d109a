"""The in-memory lexical channel of profile ``engram-hybrid/v2``: BM25 over weighted fields,
each field indexed twice (exact and Snowball-stemmed tokens, SPEC §9).

One :class:`LexicalIndex` holds one scope, analysed in the scope's language, over the slot
numbers of the scope's :class:`~search_service.doctable.DocTable`. Each field of the exact
copy keeps a posting list per term (``(slot, tf)`` pairs); the stemmed copy keeps none of its
own: one stem per token, so a field's stemmed tf of stem ``s`` is the sum of the exact tfs of
the terms that stem to ``s`` and its length is the exact one — a query derives it from those
terms' lists (half the postings of two stored copies). A query scores them into a dense vector over the slots with one compiled
pass per posting list (:func:`search_service.kernels.accumulate`). Its per-posting
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

from search_service import kernels
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
# Postings and lengths are kept for the exact copy's fields only (lane = field there).
_POSTED = len(FIELDS)
_INITIAL = 1024
# The tail tier is merged into the frozen one once it holds this many pairs (and a quarter of
# the frozen ones): merges stay rare (geometric), the tail small.
FREEZE_MIN_PAIRS = 1 << 16
# What a tail posting costs with its share of the array objects, their growth slack and the
# tail dictionaries (tracemalloc of bench/search_bench.py builds: ~35 B at 20k records).
TAIL_PAIR_BYTES = 36

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

    def freeze(self) -> None:
        """A build is done: put the index in its compact form (may be a no-op)."""
        ...

    def nbytes(self) -> int: ...


class LexicalIndex:
    """BM25 over the five weighted fields in two copies, one instance per scope. Not
    thread-safe: one writer or one reader at a time (the projection's lock).

    Postings (of the exact copy's fields; the stemmed copy is derived from them) live in two
    tiers. New documents go to a *tail*: per field, a growable
    ``array('i')`` of ``(slot, tf)`` pairs per term id. When the tail holds a quarter of the
    frozen pairs (and at least ``freeze_min_pairs``), or when the caller says a build is done
    (:meth:`freeze`), it is merged into the *frozen* tier: per field one contiguous int32 slot
    column and one tf column (uint8, wider only when a tf needs it) grouped by term id, with
    int32 offsets (CSR) — 5 bytes a posting, no Python object per posting list, no slack.
    Terms are numbered once
    (``_vocab``) for all lanes; document frequencies are an int32 matrix over term ids. A
    document's part for a (lane, term) sits in exactly one tier, so scoring both tiers adds
    the same binary64 terms per document in the same order as a single list would.
    """

    __slots__ = ("_analyzer", "_config", "_vocab", "_df", "_tails", "_tail_pairs", "_frozen_terms", "_offsets",
                 "_frozen", "_frozen_pairs", "_freeze_min", "_lengths", "_total_lengths", "_indexed", "_live",
                 "_stem_of")

    def __init__(self, language: str = DEFAULT_LANGUAGE, *, freeze_min_pairs: int = FREEZE_MIN_PAIRS) -> None:
        if freeze_min_pairs < 1:
            raise ValueError("freeze_min_pairs must be positive")
        self._analyzer: Analyzer = analyzer_for(language)
        self._config = lexical_profile_config(language)
        # _vocab[term] = term id (every lane, both copies); ids are dense, renumbered by remap
        self._vocab: dict[str, int] = {}
        # _df[copy, term id] = live documents with the term in any field of that copy
        self._df = np.zeros((len(COPIES), _INITIAL), np.int32)
        # Tail tier: _tails[field][term id] = array('i') of (slot, tf) pairs, slots ascending
        self._tails: tuple[dict[int, array[int]], ...] = tuple({} for _ in range(_POSTED))
        self._tail_pairs = 0
        # Frozen tier, for term ids < _frozen_terms: lane l's postings of term t are rows
        # _offsets[l][t]:_offsets[l][t + 1] of _frozen[l] = (slots, tfs), slots ascending
        self._frozen_terms = 0
        self._offsets: list[npt.NDArray[np.int32]] = [np.zeros(1, np.int32) for _ in range(_POSTED)]
        self._frozen: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.integer]]] = [
            (np.zeros(0, np.int32), np.zeros(0, np.uint16)) for _ in range(_POSTED)]
        self._frozen_pairs = 0
        self._freeze_min = freeze_min_pairs
        # _lengths[field, slot] = token count of that field of the document (either copy)
        self._lengths = np.zeros((_POSTED, _INITIAL), np.int32)
        self._total_lengths = [0] * len(_LANES)
        # _stem_of[exact term id] = its stem's term id (-1: not indexed as exact): a query's
        # stem reads the postings of the exact terms that map to it (4 bytes a term).
        self._stem_of = np.full(_INITIAL, -1, np.int32)
        # _indexed[slot] = 1 while the slot's document is in the statistics
        self._indexed = bytearray()
        self._live = 0

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
            grown = np.zeros((_POSTED, max(2 * self._lengths.shape[1], slot + 1)), np.int32)
            grown[:, : self._lengths.shape[1]] = self._lengths
            self._lengths = grown
        seen: tuple[set[int], ...] = tuple(set() for _ in COPIES)
        vocab, intern = self._vocab, sys.intern
        stems = self._analyzer.stems
        for lane, counts in enumerate(lanes):
            if not counts:
                continue
            copy_seen = seen[_LANES[lane][0]]
            length = sum(counts.values())
            self._total_lengths[lane] += length
            if lane >= _POSTED:
                # The stemmed copy: statistics only (its postings are the exact terms').
                for term in counts:
                    term_id = vocab.get(term)
                    if term_id is None:
                        term_id = vocab[intern(term)] = len(vocab)
                    copy_seen.add(term_id)
                continue
            tail = self._tails[lane]
            for term, tf in counts.items():
                term_id = vocab.get(term)
                if term_id is None:
                    term_id = vocab[intern(term)] = len(vocab)
                if stems and (term_id >= len(self._stem_of) or self._stem_of[term_id] < 0):
                    self._register_stem(term, term_id)
                pairs = tail.get(term_id)
                if pairs is None:
                    pairs = tail[term_id] = array("i")
                pairs.append(slot)
                pairs.append(tf)
                copy_seen.add(term_id)
            self._tail_pairs += len(counts)
            self._lengths[lane, slot] = length
        if len(vocab) > self._df.shape[1]:
            grown = np.zeros((len(COPIES), max(2 * self._df.shape[1], len(vocab))), np.int32)
            grown[:, : self._df.shape[1]] = self._df
            self._df = grown
        for c, ids in enumerate(seen):
            if ids:
                self._df[c, list(ids)] += 1
        if slot >= len(self._indexed):
            self._indexed.extend(bytes(max(len(self._indexed), slot + 1 - len(self._indexed))))
        self._indexed[slot] = 1
        self._live += 1
        if self._tail_pairs >= max(self._freeze_min, self._frozen_pairs // 4):
            self._freeze()

    def _register_stem(self, term: str, term_id: int) -> None:
        """Note which stem an exact term has (the first time it is indexed as exact)."""
        stem = self._analyzer.stemmed([term])[0]
        stem_id = self._vocab.get(stem)
        if stem_id is None:
            stem_id = self._vocab[sys.intern(stem)] = len(self._vocab)
        if len(self._vocab) > len(self._stem_of):
            grown = np.full(max(2 * len(self._stem_of), len(self._vocab)), -1, np.int32)
            grown[: len(self._stem_of)] = self._stem_of
            self._stem_of = grown
        self._stem_of[term_id] = stem_id

    def _postings(self, field: int, term_id: int) -> list[tuple[npt.NDArray[np.int32], npt.NDArray[np.integer]]]:
        """The exact term's postings in ``field``: its frozen rows and its tail, each as
        ``(slots, tfs)`` (a document is in one of them)."""
        parts = []
        if term_id < self._frozen_terms:
            offsets = self._offsets[field]
            start, end = int(offsets[term_id]), int(offsets[term_id + 1])
            if start < end:
                slots, tfs = self._frozen[field]
                parts.append((slots[start:end], tfs[start:end]))
        pairs = self._tails[field].get(term_id)
        if pairs is not None:
            # Copies: an exported buffer of the array would make its next append fail.
            flat = np.frombuffer(pairs, np.int32)
            parts.append((flat[0::2].copy(), flat[1::2].copy()))
        return parts

    def remove(self, slot: int, fields: Mapping[str, str]) -> bool:
        """Take a document out of the statistics; ``fields`` must be the ones it was added
        with. Returns whether it was indexed. Its postings stay (the caller masks dead slots)
        until :meth:`remap`."""
        if slot not in self:
            return False
        lanes = self._analyse(fields)
        self._indexed[slot] = 0
        self._live -= 1
        seen: tuple[set[int], ...] = tuple(set() for _ in COPIES)
        for lane, counts in enumerate(lanes):
            self._total_lengths[lane] -= sum(counts.values())
            seen[_LANES[lane][0]].update(self._vocab[term] for term in counts)
        for c, ids in enumerate(seen):
            if ids:
                self._df[c, list(ids)] -= 1
        return True

    def document_frequencies(self) -> int:
        """Sum of the document frequencies of every term in both copies (0: nothing live)."""
        return int(self._df.sum())

    def posting_lists(self) -> int:
        """(lane, term) pairs holding at least one posting, live or dead, in either tier."""
        frozen = sum(int(np.count_nonzero(np.diff(offsets))) for offsets in self._offsets)
        return frozen + sum(len(tail) for tail in self._tails)

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
        ids = [{term: self._vocab.get(term) for term in terms} for terms in query_terms]
        stem_of = self._stem_of[: len(self._vocab)]
        # Per query stem, the exact terms that stem to it (ascending term ids).
        members: tuple[dict[str, list[int]], ...] = (
            {term: [term_id] for term, term_id in ids[0].items() if term_id is not None},
            {term: np.flatnonzero(stem_of == term_id).tolist() for term, term_id in ids[1].items() if term_id is not None},
        )
        base = K1 * (1.0 - B)
        for lane, (c, f) in enumerate(_LANES):
            total = self._total_lengths[lane]
            if not total:
                continue
            lengths = self._lengths[f]
            slope = K1 * B * n / total
            for term in sorted(query_terms[c]):
                term_id = ids[c][term]
                if term_id is None:
                    continue
                df = int(self._df[c, term_id])
                if not df:
                    continue
                lists = [parts for member in members[c][term] if (parts := self._postings(f, member))]
                if not lists:
                    continue
                idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
                factor = query_terms[c][term] * idf * _LANE_WEIGHTS[lane] * (K1 + 1.0)
                if len(lists) == 1:
                    # One term's postings (frozen rows, tail): each document in one part.
                    for docs, tfs in lists[0]:
                        kernels.accumulate(acc, docs, tfs, factor, base, slope, lengths, size)
                    continue
                # Several exact terms share this stem: a document's stemmed tf is their sum.
                docs = np.concatenate([d for parts in lists for d, _ in parts])
                tfs = np.concatenate([t.astype(np.int64) for parts in lists for _, t in parts])
                unique, inverse = np.unique(docs, return_inverse=True)
                kernels.accumulate(acc, unique, np.bincount(inverse, weights=tfs, minlength=len(unique)), factor, base,
                            slope, lengths, size)
        return acc

    def freeze(self) -> None:
        """Merge the tail into the frozen tier now (a build is done: keep the compact form)."""
        if self._tail_pairs:
            self._freeze()

    def _freeze(self) -> None:
        """Merge the tail into the frozen tier (vectorised; the tail's slots are all newer)."""
        terms = len(self._vocab)
        for lane in range(_POSTED):
            old_offsets, (old_slots, old_tfs), tail = self._offsets[lane], self._frozen[lane], self._tails[lane]
            old_counts = np.zeros(terms, np.int64)
            old_counts[: self._frozen_terms] = np.diff(old_offsets)
            tail_ids = np.fromiter(tail.keys(), np.int64, len(tail))
            tail_counts = np.fromiter((len(pairs) // 2 for pairs in tail.values()), np.int64, len(tail))
            counts = old_counts.copy()
            counts[tail_ids] += tail_counts
            offsets = np.zeros(terms + 1, np.int64)
            np.cumsum(counts, out=offsets[1:])
            rows = np.zeros((0, 2), np.int32)
            if tail:
                rows = np.frombuffer(b"".join(pairs.tobytes() for pairs in tail.values()), np.int32).reshape(-1, 2)
            top = max(int(old_tfs.max()) if len(old_tfs) else 0, int(rows[:, 1].max()) if len(rows) else 0)
            slots = np.empty(int(offsets[-1]), np.int32)
            tfs = np.empty(int(offsets[-1]), np.uint8 if top <= 255 else np.uint16 if top <= 65535 else np.int32)
            if len(old_slots):
                # Row k of old term t moves from old_offsets[t] + k to offsets[t] + k.
                owner = np.repeat(np.arange(self._frozen_terms), old_counts[: self._frozen_terms])
                where = offsets[owner] + (np.arange(len(old_slots)) - old_offsets[owner])
                slots[where] = old_slots
                tfs[where] = old_tfs
            if len(rows):
                owner = np.repeat(tail_ids, tail_counts)
                first = np.repeat(np.cumsum(tail_counts) - tail_counts, tail_counts)
                # After the term's frozen rows, in the tail's (ascending) order.
                where = offsets[owner] + old_counts[owner] + (np.arange(len(rows)) - first)
                slots[where] = rows[:, 0]
                tfs[where] = rows[:, 1]
            self._offsets[lane] = offsets.astype(np.int32)
            self._frozen[lane] = (slots, tfs)
        self._tails = tuple({} for _ in range(_POSTED))
        self._frozen_terms = terms
        self._frozen_pairs += self._tail_pairs
        self._tail_pairs = 0

    def remap(self, remap: npt.NDArray[np.int64], size: int) -> None:
        """Renumber after the table compacted: ``remap[old] = new`` (-1: dead, dropped), and
        forget the terms no live document holds (term ids are renumbered, order kept)."""
        self.freeze()
        terms = len(self._vocab)
        keep_term = (self._df[:, :terms] > 0).any(axis=0)
        kept_pairs = 0
        for lane in range(_POSTED):
            (slots, tfs), offsets = self._frozen[lane], self._offsets[lane]
            new_slots = remap[slots] if len(slots) else np.zeros(0, np.int64)
            keep = new_slots >= 0
            owner = np.repeat(np.arange(terms), np.diff(offsets))[keep]
            counts = np.bincount(owner, minlength=terms)[keep_term]
            fresh = np.zeros(len(counts) + 1, np.int32)
            np.cumsum(counts, out=fresh[1:])
            self._offsets[lane] = fresh
            self._frozen[lane] = (new_slots[keep].astype(np.int32), tfs[keep])
            kept_pairs += int(keep.sum())
        new_id = np.cumsum(keep_term) - 1
        self._vocab = {term: int(new_id[term_id]) for term, term_id in self._vocab.items() if keep_term[term_id]}
        # A kept exact term's stem is kept too (its live documents hold the stem).
        old_stems = self._stem_of[:terms] if len(self._stem_of) >= terms else np.concatenate(
            [self._stem_of, np.full(terms - len(self._stem_of), -1, np.int32)])
        mapped = (old_stems >= 0) & keep_term
        mapped[mapped] &= keep_term[old_stems[mapped]]
        stem_of = np.full(max(_INITIAL, 2 * len(self._vocab)), -1, np.int32)
        stem_of[new_id[mapped]] = new_id[old_stems[mapped]]
        self._stem_of = stem_of
        df = np.zeros((len(COPIES), max(_INITIAL, 2 * len(self._vocab))), np.int32)
        df[:, : len(self._vocab)] = self._df[:, :terms][:, keep_term]
        self._df = df
        self._frozen_terms = len(self._vocab)
        self._frozen_pairs = kept_pairs
        old = self._lengths
        lengths = np.zeros((_POSTED, max(_INITIAL, 2 * size)), np.int32)
        live = np.flatnonzero(remap >= 0)
        lengths[:, remap[live]] = old[:, live]
        self._lengths = lengths
        indexed = bytearray(max(_INITIAL, 2 * size))
        for slot in np.flatnonzero(np.frombuffer(bytes(self._indexed), np.uint8)[: len(remap)]).tolist():
            if remap[slot] >= 0:
                indexed[int(remap[slot])] = 1
        self._indexed = indexed

    def nbytes(self) -> int:
        """Bytes of the postings (dead ones included until a remap: the frozen columns and
        offsets exactly, the tail at its measured cost with its array objects), document
        frequencies, length columns and the stem map; not the vocabulary. O(lanes)."""
        frozen = sum(slots.nbytes + tfs.nbytes + offsets.nbytes
                     for (slots, tfs), offsets in zip(self._frozen, self._offsets))
        return (frozen + TAIL_PAIR_BYTES * self._tail_pairs + self._df.nbytes + self._lengths.nbytes
                + self._stem_of.nbytes + len(self._indexed))
