"""Hybrid ranking of profile ``engram-hybrid/v2`` (SPEC §9): eligibility, RRF fusion, recency.

Pure functions over channel hit lists; the index engines produce the hits, the service wraps
the result into packets and receipts. Every rule here is written down in docs/ranking.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

PROFILE = "engram-hybrid/v2"
RRF_K = 60
HALF_LIFE_MS = 30 * 24 * 60 * 60 * 1000
# Recency halves every HALF_LIFE_MS: RECENCY_BASE ** (age / HALF_LIFE_MS).
RECENCY_BASE = 0.5
FUSED_WEIGHT = 0.95
RECENCY_WEIGHT = 0.05
SCORE_DECIMALS = 12
_SCALE = 10.0**SCORE_DECIMALS


@dataclass(frozen=True, slots=True)
class DocMeta:
    """What ranking needs to know about an indexed record besides its text.

    ``valid_from_ms``/``valid_to_ms`` are ``valid_time.t``/``valid_time.t_end`` (epoch ms);
    ``expires_at_ms`` is ``retention.expires_at`` in epoch ms, when present.
    """

    record_id: str
    valid_from_ms: int
    valid_to_ms: int | None = None
    expires_at_ms: int | None = None


class RankedHit(NamedTuple):
    """One ranked record: ``rank`` is 1-based; ``score``, ``fused``, ``recency`` in [0, 1]."""

    record_id: str
    score: float
    rank: int
    fused: float
    recency: float


def is_eligible(meta: DocMeta, now_ms: int) -> bool:
    """Valid time contains now (closed interval ``[t, t_end]``) and ``expires_at`` is later."""
    if meta.valid_from_ms > now_ms:
        return False
    if meta.valid_to_ms is not None and now_ms > meta.valid_to_ms:
        return False
    return meta.expires_at_ms is None or meta.expires_at_ms > now_ms


def recency(meta: DocMeta, now_ms: int) -> float:
    """``0.5 ** (age / 30 days)`` with ``age = max(0, now - valid_time.t)``, in (0, 1]."""
    return recency_from(meta.valid_from_ms, now_ms)


def recency_from(valid_from_ms: int, now_ms: int) -> float:
    """:func:`recency` of a record valid from ``valid_from_ms``."""
    return RECENCY_BASE ** (max(0, now_ms - valid_from_ms) / HALF_LIFE_MS)


def round_score(value: float) -> float:
    """Quantise a value in [0, 1] to 12 decimals: ``floor(value * 1e12 + 0.5) / 1e12``.

    Plain IEEE-754 binary64 operations, so the result is the same on every platform and its
    shortest repr (what canonical JSON prints) has at most 12 decimals.
    """
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise ValueError("score out of range")
    return math.floor(value * _SCALE + 0.5) / _SCALE


def _channel_positions(
    hits: Iterable[tuple[str, float]], metas: Mapping[str, DocMeta], now_ms: int
) -> list[str]:
    """Eligible doc ids of one channel in channel-rank order (score desc, record_id asc)."""
    keyed: list[tuple[float, str, str]] = []
    for doc_id, score in hits:
        if not math.isfinite(score):
            raise ValueError("channel scores must be finite")
        meta = metas.get(doc_id)
        if meta is not None and is_eligible(meta, now_ms):
            keyed.append((-score, meta.record_id, doc_id))
    keyed.sort()
    ordered = [doc_id for _, _, doc_id in keyed]
    if len(set(ordered)) != len(ordered):
        raise ValueError("a channel listed the same document twice")
    return ordered


def rank(
    lexical_hits: Sequence[tuple[str, float]],
    semantic_hits: Sequence[tuple[str, float]] | None,
    metas: Mapping[str, DocMeta],
    now_ms: int,
) -> list[RankedHit]:
    """Fuse the channels' hits into the final order of eligible records.

    Per channel, eligible hits are ranked 1.. by descending channel score, ties by record_id.
    ``fused = sum(1 / (60 + rank_c)) * 61 / channels`` (1.0 = first in every channel used);
    ``score = 0.95 * fused + 0.05 * recency``; order: score desc, recency desc, record_id asc.
    Only documents present in at least one channel are ranked; ``semantic_hits=None`` means
    the semantic channel was not used (it does not count in the normalisation).
    """
    channels = [lexical_hits] if semantic_hits is None else [lexical_hits, semantic_hits]
    raw: dict[str, float] = {}
    for hits in channels:
        for position, doc_id in enumerate(_channel_positions(hits, metas, now_ms), start=1):
            raw[doc_id] = raw.get(doc_id, 0.0) + 1.0 / (RRF_K + position)
    scale = (RRF_K + 1) / len(channels)
    keyed: list[tuple[float, float, str, float]] = []
    # round_score inlined (the same IEEE operations): every value here is in [0, 1] by
    # construction, and this loop runs once per hit.
    floor = math.floor
    for doc_id, total in raw.items():
        meta = metas[doc_id]
        fused = floor(min(1.0, total * scale) * _SCALE + 0.5) / _SCALE
        fresh = floor(RECENCY_BASE ** (max(0, now_ms - meta.valid_from_ms) / HALF_LIFE_MS) * _SCALE + 0.5) / _SCALE
        score = floor((FUSED_WEIGHT * fused + RECENCY_WEIGHT * fresh) * _SCALE + 0.5) / _SCALE
        keyed.append((-score, -fresh, meta.record_id, fused))
    keyed.sort()
    make = tuple.__new__
    return [
        make(RankedHit, (record_id, -neg_score, i, fused, -neg_fresh))
        for i, (neg_score, neg_fresh, record_id, fused) in enumerate(keyed, start=1)
    ]


def profile_config(
    lexical: Mapping[str, object], semantic: Mapping[str, object] | None = None
) -> dict[str, object]:
    """The full profile configuration pinned by the rank receipt (hashed into its digest).

    ``lexical`` (and ``semantic`` when that channel is configured) are the engines' own
    configs, e.g. ``search_service.lexical.LEXICAL_PROFILE_CONFIG``.
    """
    channels: dict[str, object] = {"lexical": dict(lexical)}
    if semantic is not None:
        channels["semantic"] = dict(semantic)
    return {
        "profile": PROFILE,
        "channels": channels,
        "eligibility": "valid_time.t <= now <= valid_time.t_end (t_end absent = open); "
        "retention.expires_at absent or > now",
        "channel_rank": "1-based over eligible hits by channel score desc, then record_id asc",
        "fusion": {
            "method": "rrf",
            "k": RRF_K,
            "normalisation": "sum(1 / (k + rank_c)) * (k + 1) / channels_used, capped at 1",
        },
        "recency": {
            "half_life_ms": HALF_LIFE_MS,
            "formula": "0.5 ** (max(0, now - valid_time.t) / half_life_ms)",
        },
        "score": {"fused_weight": FUSED_WEIGHT, "recency_weight": RECENCY_WEIGHT},
        "rounding": "fused, recency, then score (from the rounded two) each quantised as "
        "floor(x * 1e12 + 0.5) / 1e12 in IEEE-754 binary64",
        "order": ["score desc", "recency desc", "record_id asc"],
    }
