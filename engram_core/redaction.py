"""Record redaction by the scope's field allowlist (SPEC §9 "Redaction"): one implementation
for the search packets and the get path (the gateway), hence in the shared core.

Only top-level fields are projected. ``record_id`` always stays, whatever the allowlist says.
Removed fields are reported as RFC 6901 JSON pointers (``/retention``), sorted by code point,
and bound by a redaction receipt (digest kind ``redaction``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from engram_core.digests import digest, with_digest

DEFAULT_ALLOWLIST = (
    "record_id",
    "record_digest",
    "schema_version",
    "valid_time",
    "components",
    "primary_component_id",
    "primary_event",
    "citations",
    "trust",
    "recorded_at",
)


def json_pointer(field: str) -> str:
    """The RFC 6901 pointer of a top-level member (``~`` → ``~0``, ``/`` → ``~1``)."""
    return "/" + field.replace("~", "~0").replace("/", "~1")


def effective_allowlist(allowlist: Iterable[str] | None = None) -> list[str]:
    """The allowlist actually applied: the default when None, plus ``record_id``; sorted."""
    return list(_effective(_key(allowlist))[1])


def _key(allowlist: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if allowlist is None else tuple(allowlist)


@lru_cache(maxsize=256)
def _effective(allowlist: tuple[str, ...] | None) -> tuple[frozenset[str], tuple[str, ...]]:
    """The effective allowlist as a set and sorted (a scope's allowlist is asked for on every
    packet it redacts: worked out once per distinct allowlist)."""
    fields = set(DEFAULT_ALLOWLIST if allowlist is None else allowlist)
    fields.add("record_id")
    return frozenset(fields), tuple(sorted(fields))


def _redact(record: Mapping[str, object], allowed: frozenset[str]) -> tuple[dict[str, object], list[str]]:
    if "record_id" not in record:
        raise ValueError("record without record_id")
    projected = {name: value for name, value in record.items() if name in allowed}
    redacted = sorted(json_pointer(name) for name in record if name not in allowed)
    return projected, redacted


def redact(
    record: Mapping[str, object], allowlist: Iterable[str] | None = None
) -> tuple[dict[str, object], list[str]]:
    """Project ``record`` onto the allowlist; returns ``(projected, redacted_fields)``.

    The projection keeps the record's member order and shares (does not copy) nested values.
    """
    return _redact(record, _effective(_key(allowlist))[0])


def _receipt_body(record_id: str, redacted_fields: list[str], ordered: tuple[str, ...]) -> dict[str, object]:
    """The redaction receipt without its digest (``ordered``: the effective allowlist)."""
    return {"record_id": record_id, "allowlist": list(ordered), "redacted_fields": list(redacted_fields)}


def redaction_receipt(
    record_id: str, redacted_fields: list[str], allowlist: Iterable[str] | None = None
) -> dict[str, object]:
    """``{record_id, allowlist, redacted_fields, receipt_digest}`` with its self-digest."""
    body = _receipt_body(record_id, redacted_fields, _effective(_key(allowlist))[1])
    return with_digest("redaction", body, "receipt_digest")


def project(
    record: Mapping[str, object], allowlist: Iterable[str] | None = None
) -> dict[str, object]:
    """The redacted part of a search packet or get result.

    Returns ``{record, redacted_fields, redaction_receipt_digest}``.
    """
    allowed, ordered = _effective(_key(allowlist))
    projected, redacted = _redact(record, allowed)
    # The digest redaction_receipt() sets, without its copy of the receipt.
    body = _receipt_body(str(record["record_id"]), redacted, ordered)
    return {
        "record": projected,
        "redacted_fields": redacted,
        "redaction_receipt_digest": digest("redaction", body),
    }
