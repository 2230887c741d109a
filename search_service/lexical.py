"""The in-memory lexical channel of profile ``engram-hybrid/v2``: BM25 over weighted fields,
each field indexed twice (exact and Snowball-stemmed tokens, SPEC §9).

One :class:`LexicalIndex` holds one scope, analysed in the scope's language. Postings are
maintained incrementally: ``add`` and ``remove`` cost O(tokens of the document); statistics are
kept as integer sums, so an index built by any sequence of adds and removes scores exactly
(bit for bit) like one built fresh from the surviving documents. :class:`Index` is the seam
for another engine.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from search_service.analyzer import DEFAULT_LANGUAGE, Analyzer, analyzer_for
from search_service.ranking import DocMeta

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
# (copy, field) slots, copy-major: slot = copy * len(FIELDS) + field.
_SLOTS = tuple((c, f) for c in range(len(COPIES)) for f in range(len(FIELDS)))
_SLOT_WEIGHTS = tuple(COPY_WEIGHTS[COPIES[c]] * FIELD_WEIGHTS[FIELDS[f]] for c, f in _SLOTS)

_ENGINE_CONFIG: Mapping[str, object] = {
    "engine": "engram-bm25f/py-2",
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


@runtime_checkable
class Index(Protocol):
    """What the search service needs from a per-scope lexical engine."""

    def profile_config(self) -> Mapping[str, object]: ...

    def add(self, doc_id: str, fields: Mapping[str, str], meta: DocMeta) -> None: ...

    def remove(self, doc_id: str) -> bool: ...

    def __len__(self) -> int: ...

    def __contains__(self, doc_id: object) -> bool: ...

    def meta(self, doc_id: str) -> DocMeta | None: ...

    def metas(self) -> Mapping[str, DocMeta]: ...

    def search(self, query: str) -> list[tuple[str, float]]: ...


class LexicalIndex:
    """BM25 over the five weighted fields in two copies, one instance per scope. Not
    thread-safe."""

    __slots__ = ("_analyzer", "_config", "_postings", "_lengths", "_total_lengths", "_df", "_terms", "_metas")

    def __init__(self, language: str = DEFAULT_LANGUAGE) -> None:
        self._analyzer: Analyzer = analyzer_for(language)
        self._config = lexical_profile_config(language)
        # _postings[slot][term][doc_id] = tf of term in that (copy, field) of doc_id
        self._postings: tuple[dict[str, dict[str, int]], ...] = tuple({} for _ in _SLOTS)
        # _lengths[slot][doc_id] = token count of that field copy (only when non-empty)
        self._lengths: tuple[dict[str, int], ...] = tuple({} for _ in _SLOTS)
        self._total_lengths = [0] * len(_SLOTS)
        # _df[copy][term] = documents with the term in any field of that copy
        self._df: tuple[dict[str, int], ...] = tuple({} for _ in COPIES)
        self._terms: dict[str, tuple[tuple[str, ...], ...]] = {}
        self._metas: dict[str, DocMeta] = {}

    @property
    def language(self) -> str:
        return self._analyzer.language

    def profile_config(self) -> Mapping[str, object]:
        """The engine's part of the ranking profile config (hashed into the rank receipt)."""
        return self._config

    def __len__(self) -> int:
        return len(self._metas)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._metas

    def meta(self, doc_id: str) -> DocMeta | None:
        return self._metas.get(doc_id)

    def metas(self) -> Mapping[str, DocMeta]:
        """All indexed documents' metadata by doc id (a live read-only view; do not mutate)."""
        return self._metas

    def _copies(self, text: str) -> tuple[list[str], list[str]]:
        exact = self._analyzer.exact(text)
        return exact, self._analyzer.stemmed(exact)

    def add(self, doc_id: str, fields: Mapping[str, str], meta: DocMeta) -> None:
        """Index a document; an existing ``doc_id`` is replaced. Missing fields are empty."""
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise ValueError("unknown search field")
        if doc_id in self._metas:
            self.remove(doc_id)
        analysed = [self._copies(fields.get(name, "")) for name in FIELDS]
        seen: tuple[set[str], ...] = tuple(set() for _ in COPIES)
        terms: list[tuple[str, ...]] = []
        for slot, (c, f) in enumerate(_SLOTS):
            tokens = analysed[f][c]
            counts = Counter(tokens)
            postings = self._postings[slot]
            for term, tf in counts.items():
                postings.setdefault(term, {})[doc_id] = tf
            if tokens:
                self._lengths[slot][doc_id] = len(tokens)
                self._total_lengths[slot] += len(tokens)
            seen[c].update(counts)
            terms.append(tuple(counts))
        for c, copy_terms in enumerate(seen):
            df = self._df[c]
            for term in copy_terms:
                df[term] = df.get(term, 0) + 1
        self._terms[doc_id] = tuple(terms)
        self._metas[doc_id] = meta

    def remove(self, doc_id: str) -> bool:
        """Drop a document; returns whether it was indexed (unknown ids are a no-op)."""
        terms = self._terms.pop(doc_id, None)
        if terms is None:
            return False
        del self._metas[doc_id]
        seen: tuple[set[str], ...] = tuple(set() for _ in COPIES)
        for slot, slot_terms in enumerate(terms):
            postings = self._postings[slot]
            for term in slot_terms:
                docs = postings[term]
                del docs[doc_id]
                if not docs:
                    del postings[term]
            length = self._lengths[slot].pop(doc_id, 0)
            self._total_lengths[slot] -= length
            seen[_SLOTS[slot][0]].update(slot_terms)
        for c, copy_terms in enumerate(seen):
            df_c = self._df[c]
            for term in copy_terms:
                df = df_c[term] - 1
                if df:
                    df_c[term] = df
                else:
                    del df_c[term]
        return True

    def search(self, query: str) -> list[tuple[str, float]]:
        """Every matching document with its BM25 score, by score desc then doc_id asc."""
        n = len(self._metas)
        exact, stemmed = self._copies(query)
        query_terms = (Counter(exact), Counter(stemmed))
        if n == 0 or not exact:
            return []
        scores: dict[str, float] = {}
        base = K1 * (1.0 - B)
        for slot, (c, f) in enumerate(_SLOTS):
            total = self._total_lengths[slot]
            if not total:
                continue
            postings, lengths = self._postings[slot], self._lengths[slot]
            slope = K1 * B * n / total
            for term in sorted(query_terms[c]):
                docs = postings.get(term)
                if not docs:
                    continue
                df = self._df[c][term]
                idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
                factor = query_terms[c][term] * idf * _SLOT_WEIGHTS[slot] * (K1 + 1.0)
                for doc_id, tf in docs.items():
                    part = factor * tf / (tf + base + slope * lengths[doc_id])
                    scores[doc_id] = scores.get(doc_id, 0.0) + part
        hits = list(scores.items())
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits
