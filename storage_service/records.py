"""What a record is made of (SPEC §5, §8) and when it is eligible.

A record's *content* is fixed at capture: the effective payload, the evidence summary and the
candidate it came from. Its ``record_digest`` is the digest (kind ``record``) of that content,
so capture can report it and acceptance derives ``record_id`` from it. ``trust`` and
``recorded_at`` are assigned at admission; they travel beside the content in the record
projection and are bound by the decision receipt (docs/storage.md).
"""

from __future__ import annotations

from typing import Any

from engram_core.digests import digest
from engram_core.ids import record_id_from_digest
from engram_core.timefmt import parse_instant


def record_content(effective_payload: dict[str, Any], evidence: dict[str, Any], candidate_id: str) -> dict[str, Any]:
    return {**effective_payload, "evidence": evidence, "candidate_id": candidate_id}


def record_digest(content: dict[str, Any]) -> str:
    return digest("record", content)


def payload_digest(effective_payload: dict[str, Any]) -> str:
    return digest("payload", effective_payload)


def record_id_for(content: dict[str, Any]) -> str:
    return record_id_from_digest(record_digest(content))


def projection(content: dict[str, Any], *, trust: str, recorded_at: str) -> dict[str, Any]:
    """The full (unredacted) record as search and get see it (its digest computed: at admission)."""
    rdigest = record_digest(content)
    return stored_projection(content, record_id=record_id_from_digest(rdigest), digest=rdigest, trust=trust,
                             recorded_at=recorded_at)


def stored_projection(content: dict[str, Any], *, record_id: str, digest: str, trust: str,
                      recorded_at: str) -> dict[str, Any]:
    """The record as :func:`projection` made it at admission, from its stored id and digest (a
    read decrypts the content its AAD binds to that id; nothing to hash again)."""
    return {
        "record_id": record_id,
        "record_digest": digest,
        **content,
        "trust": trust,
        "recorded_at": recorded_at,
    }


def eligible_now(doc: dict[str, Any], now: int) -> bool:
    """Valid time contains now (closed interval) and ``expires_at`` is absent or later."""
    valid = doc["valid_time"]
    if valid["t"] > now or ("t_end" in valid and now > valid["t_end"]):
        return False
    expires = doc.get("expires_at")
    return expires is None or parse_instant(expires) > now
