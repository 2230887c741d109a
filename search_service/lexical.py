"""The in-memory lexical channel of profile ``engram-hybrid/v1``: BM25 over weighted fields.

One :class:`LexicalIndex` holds one scope. Postings are maintained incrementally: ``add`` and
``remove`` cost O(tokens of the document); statistics are kept as integer sums, so an index
built by any sequence of adds and removes scores exactly (bit for bit) like one built fresh
from the surviving documents. :class:`Index` is the seam for another engine (tantivy).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from search_service.ranking import DocMeta
from search_service.tokenizer import TOKENIZER_DESCRIPTION, tokenize

FIELDS = ("primary", "decision", "evidence", "context", "citations")
FIELD_WEIGHTS: Mapping[str, float] = {
    "primary": 3.0,
    "decision": 2.0,
    "evidence": 1.5,
    "context": 1.0,
    "citations": 0.5,
}
K1 = 1.2
B = 0.75
_KINDS = ("decision", "evidence", "context")

LEXICAL_PROFILE_CONFIG: Mapping[str, object] = {
    "engine": "engram-bm25f/py-1",
    "fields": list(FIELDS),
    "field_weights": dict(FIELD_WEIGHTS),
    "field_sources": {
        "primary": "text of the component named by primary_component_id",
        "decision": "texts of the other components of kind decision, joined by LF",
        "evidence": "texts of the other components of kind evidence, joined by LF",
        "context": "texts of the other components of kind context, joined by LF",
        "citations": "source_ref of every citation, joined by LF",
    },
    "k1": K1,
    "b": B,
    "idf": "ln(1 + (N - df + 0.5) / (df + 0.5)); N = documents in the scope's index, "
    "df = documents containing the term in at least one field",
    "score": "sum over query terms t, each counted as often as it occurs in the query, and over "
    "fields f with tf_f > 0 of idf(t) * w_f * tf_f * (k1 + 1) / "
    "(tf_f + k1 * (1 - b + b * len_f / avglen_f)); len_f = tokens of field f in the document, "
    "avglen_f = tokens of field f in all documents / N",
    "matching": "every document containing at least one query term in any field; never truncated",
    "tokenizer": TOKENIZER_DESCRIPTION,
}


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
    """BM25 over the five weighted fields, one instance per scope. Not thread-safe."""

    __slots__ = ("_postings", "_lengths", "_total_lengths", "_df", "_terms", "_metas")

    def __init__(self) -> None:
        # _postings[f][term][doc_id] = tf of term in field f of doc_id
        self._postings: tuple[dict[str, dict[str, int]], ...] = tuple({} for _ in FIELDS)
        # _lengths[f][doc_id] = token count of field f (only for non-empty fields)
        self._lengths: tuple[dict[str, int], ...] = tuple({} for _ in FIELDS)
        self._total_lengths = [0] * len(FIELDS)
        self._df: dict[str, int] = {}
        self._terms: dict[str, tuple[tuple[str, ...], ...]] = {}
        self._metas: dict[str, DocMeta] = {}

    def profile_config(self) -> Mapping[str, object]:
        """The engine's part of the ranking profile config (hashed into the rank receipt)."""
        return LEXICAL_PROFILE_CONFIG

    def __len__(self) -> int:
        return len(self._metas)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._metas

    def meta(self, doc_id: str) -> DocMeta | None:
        return self._metas.get(doc_id)

    def metas(self) -> Mapping[str, DocMeta]:
        """All indexed documents' metadata by doc id (a live read-only view; do not mutate)."""
        return self._metas

    def add(self, doc_id: str, fields: Mapping[str, str], meta: DocMeta) -> None:
        """Index a document; an existing ``doc_id`` is replaced. Missing fields are empty."""
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise ValueError("unknown search field")
        if doc_id in self._metas:
            self.remove(doc_id)
        seen: set[str] = set()
        terms: list[tuple[str, ...]] = []
        for f, name in enumerate(FIELDS):
            tokens = tokenize(fields.get(name, ""))
            counts = Counter(tokens)
            postings = self._postings[f]
            for term, tf in counts.items():
                postings.setdefault(term, {})[doc_id] = tf
            if tokens:
                self._lengths[f][doc_id] = len(tokens)
                self._total_lengths[f] += len(tokens)
            seen.update(counts)
            terms.append(tuple(counts))
        for term in seen:
            self._df[term] = self._df.get(term, 0) + 1
        self._terms[doc_id] = tuple(terms)
        self._metas[doc_id] = meta

    def remove(self, doc_id: str) -> bool:
        """Drop a document; returns whether it was indexed (unknown ids are a no-op)."""
        terms = self._terms.pop(doc_id, None)
        if terms is None:
            return False
        del self._metas[doc_id]
        seen: set[str] = set()
        for f, field_terms in enumerate(terms):
            postings = self._postings[f]
            for term in field_terms:
                docs = postings[term]
                del docs[doc_id]
                if not docs:
                    del postings[term]
            length = self._lengths[f].pop(doc_id, 0)
            self._total_lengths[f] -= length
            seen.update(field_terms)
        for term in seen:
            df = self._df[term] - 1
            if df:
                self._df[term] = df
            else:
                del self._df[term]
        return True

    def search(self, query: str) -> list[tuple[str, float]]:
        """Every matching document with its BM25 score, by score desc then doc_id asc."""
        n = len(self._metas)
        query_terms = Counter(tokenize(query))
        if n == 0 or not query_terms:
            return []
        scores: dict[str, float] = {}
        for term in sorted(query_terms):
            df = self._df.get(term)
            if df is None:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            qtf = query_terms[term]
            for f, name in enumerate(FIELDS):
                docs = self._postings[f].get(term)
                if not docs:
                    continue
                lengths = self._lengths[f]
                avglen = self._total_lengths[f] / n
                factor = qtf * idf * FIELD_WEIGHTS[name] * (K1 + 1.0)
                base = K1 * (1.0 - B)
                slope = K1 * B / avglen
                for doc_id, tf in docs.items():
                    part = factor * tf / (tf + base + slope * lengths[doc_id])
                    scores[doc_id] = scores.get(doc_id, 0.0) + part
        hits = list(scores.items())
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits
