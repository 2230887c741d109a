"""Shared builders for the search library tests."""

from __future__ import annotations

DAY_MS = 24 * 60 * 60 * 1000
NOW_MS = 1_800_000_000_000


def record(
    record_id: str,
    primary: str,
    *,
    kind: str = "decision",
    others: tuple[tuple[str, str], ...] = (),
    sources: tuple[str, ...] = ("doc://source",),
    valid_from_ms: int = NOW_MS - DAY_MS,
) -> dict:
    """A record dict shaped like an accepted capture payload."""
    components = [{"component_id": "c0", "kind": kind, "text": primary, "citation_ids": ["k0"]}]
    for i, (other_kind, text) in enumerate(others, start=1):
        components.append(
            {"component_id": f"c{i}", "kind": other_kind, "text": text, "citation_ids": ["k0"]}
        )
    citations = [
        {
            "citation_id": f"k{i}",
            "source_ref": source,
            "locator": {"scheme": "uri", "value": source},
            "content_digest": "sha256:" + "0" * 64,
        }
        for i, source in enumerate(sources)
    ]
    return {
        "record_id": record_id,
        "record_digest": "sha256:" + "1" * 64,
        "schema_version": 2,
        "valid_time": {"t": valid_from_ms},
        "components": components,
        "primary_component_id": "c0",
        "primary_event": {"at": valid_from_ms, "type_ref": "event", "citation_id": "k0"},
        "citations": citations,
        "trust": "asserted",
        "recorded_at": "2027-01-15T08:00:00.000Z",
        "retention": {"derivative_rule": "make-ineligible"},
    }
