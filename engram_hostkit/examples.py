"""Ready-made, valid tool arguments: what a host (or a test) sends to the six tools.

Every builder returns a fresh plain ``dict`` that passes
:func:`engram_core.schemas.validate.validate_arguments`. Optional fields are only present when
asked for (never ``None``). Only the standard library is used, so the module is safe to import
anywhere.

Example: a host capturing a decision and asking for its admission (``memory`` is an
:class:`engram_hostkit.client.EngramClient`)::

    envelope = await memory.call("engram_memory_capture",
                                 make_capture_args(text="Decision: pin grpcio and protobuf together.",
                                                   purpose_ref="purpose:support"))
    candidate_id = envelope["output"]["value"]["candidate_id"]
    envelope = await memory.call("engram_memory_request_admission",
                                 make_request_admission_args(candidate_id))
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = [
    "EXAMPLE_VALID_FROM_MS",
    "content_digest_of",
    "make_capture_args",
    "make_forget_args",
    "make_get_args",
    "make_maximal_capture_args",
    "make_request_admission_args",
    "make_search_args",
    "make_withdraw_args",
    "idempotency_key_for",
]

# 2023-11-14T22:13:20.000Z: a fixed instant in the past, so the example record is valid "now".
EXAMPLE_VALID_FROM_MS = 1_700_000_000_000

DEFAULT_TEXT = "Decision: every digest is SHA-256 over RFC 8785 canonical JSON with a domain prefix."


def content_digest_of(content: str | bytes) -> str:
    """``"sha256:" + hex(SHA-256(content))`` (UTF-8 for text): a well-formed content digest."""
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    return "sha256:" + hashlib.sha256(data).hexdigest()


def idempotency_key_for(*parts: str) -> str:
    """A deterministic 40-byte ASCII idempotency key derived from ``parts``.

    The same logical operation gets the same key (so a retry replays), another one a new key.
    """
    h = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()
    return "key-" + h[:36]


def make_capture_args(
    idempotency_key: str | None = None,
    text: str = DEFAULT_TEXT,
    purpose_ref: str = "purpose:test",
    *,
    kind: str = "decision",
    t: int = EXAMPLE_VALID_FROM_MS,
    t_end: int | None = None,
    event_at: int | None = None,
    event_type_ref: str = "event:decided",
    component_id: str = "comp-1",
    citation_id: str = "cite-1",
    source_ref: str = "doc:design-notes",
    locator_scheme: str = "section",
    locator_value: str = "1",
    cited_content: str | None = None,
    observed_at: str | None = None,
    evidence_ref: str = "evidence:review",
    evidence_digest: str | None = None,
    attestation: str | None = None,
    retention: dict[str, Any] | None = None,
    family_refs: list[str] | None = None,
) -> dict[str, Any]:
    """A valid minimal capture: one primary ``kind`` component citing one citation, evidence citing it.

    ``idempotency_key`` defaults to a key derived from ``text`` and ``purpose_ref`` (same content,
    same key: a retry replays). Optional payload fields (``t_end``, ``observed_at``,
    ``attestation``, ``retention``, ``family_refs`` as ``reconciliation``) appear only when given.
    """
    if idempotency_key is None:
        idempotency_key = idempotency_key_for("capture", purpose_ref, text)
    citation: dict[str, Any] = {
        "citation_id": citation_id,
        "source_ref": source_ref,
        "locator": {"scheme": locator_scheme, "value": locator_value},
        "content_digest": content_digest_of(text if cited_content is None else cited_content),
    }
    if observed_at is not None:
        citation["observed_at"] = observed_at
    valid_time: dict[str, Any] = {"t": t}
    if t_end is not None:
        valid_time["t_end"] = t_end
    payload: dict[str, Any] = {
        "schema_version": 2,
        "purpose_ref": purpose_ref,
        "valid_time": valid_time,
        "components": [
            {"component_id": component_id, "kind": kind, "text": text, "citation_ids": [citation_id]},
        ],
        "primary_component_id": component_id,
        "primary_event": {"at": t if event_at is None else event_at, "type_ref": event_type_ref, "citation_id": citation_id},
        "citations": [citation],
    }
    if retention is not None:
        payload["retention"] = dict(retention)
    if family_refs is not None:
        payload["reconciliation"] = {"family_refs": list(family_refs)}
    evidence: dict[str, Any] = {
        "evidence_ref": evidence_ref,
        "evidence_digest": evidence_digest or content_digest_of("evidence:" + text),
        "citation_ids": [citation_id],
    }
    if attestation is not None:
        evidence["attestation"] = attestation
    return {"idempotency_key": idempotency_key, "payload": payload, "evidence": evidence}


def make_maximal_capture_args(
    idempotency_key: str = "maximal-capture-key-0001",
    purpose_ref: str = "purpose:test",
    *,
    expires_at: str = "2999-12-31T23:59:59.999Z",
    derivative_rule: str = "make-ineligible",
    text_bytes: int = 8192,
) -> dict[str, Any]:
    """A valid capture with every optional field and every count at its maximum.

    64 components (the primary one cites all 256 citations), 256 citations each with
    ``observed_at``, ``t_end``, ``retention`` with ``expires_at``, 64 ascending family refs, and a
    4096-byte attestation; component texts are ``text_bytes`` bytes each (default 8192; all 64
    at the 65536-byte maximum would exceed the 1 MiB arguments limit). ``expires_at`` defaults to
    far in the future: valid for the schema, but beyond any sane scope cap (UNAUTHORIZED).
    """
    citation_ids = [f"cite-{i:03d}" for i in range(256)]
    citations = [
        {
            "citation_id": cid,
            "source_ref": f"doc:source-{i:03d}",
            "locator": {"scheme": "line", "value": str(i + 1)},
            "content_digest": content_digest_of(f"cited content {i}"),
            "observed_at": "2023-11-14T22:13:20.000Z",
        }
        for i, cid in enumerate(citation_ids)
    ]
    kinds = ("decision", "context", "evidence")
    components = []
    for i in range(64):
        prefix = f"component {i:02d}: "
        body = (prefix + "x" * text_bytes)[:text_bytes]
        components.append(
            {
                "component_id": f"comp-{i:02d}",
                "kind": "decision" if i == 0 else kinds[i % 3],
                "text": body,
                "citation_ids": list(citation_ids) if i == 0 else [citation_ids[i], citation_ids[(i + 1) % 256]],
            }
        )
    return {
        "idempotency_key": idempotency_key,
        "payload": {
            "schema_version": 2,
            "purpose_ref": purpose_ref,
            "valid_time": {"t": EXAMPLE_VALID_FROM_MS, "t_end": EXAMPLE_VALID_FROM_MS + 86_400_000 * 365 * 100},
            "components": components,
            "primary_component_id": "comp-00",
            "primary_event": {"at": EXAMPLE_VALID_FROM_MS, "type_ref": "event:decided", "citation_id": citation_ids[0]},
            "citations": citations,
            "retention": {"derivative_rule": derivative_rule, "expires_at": expires_at},
            "reconciliation": {"family_refs": [f"family:{i:02d}" for i in range(64)]},
        },
        "evidence": {
            "evidence_ref": "evidence:review",
            "evidence_digest": content_digest_of("evidence"),
            "citation_ids": list(citation_ids),
            "attestation": "a" * 4096,
        },
    }


def make_search_args(query: str, purpose_ref: str = "purpose:test", **kw: Any) -> dict[str, Any]:
    """Search arguments; pass ``limit``, ``max_packet_bytes``, ``capability_policy``, ``page_cursor`` as keywords."""
    return {"query": query, "purpose_ref": purpose_ref, **kw}


def make_get_args(record_id: str, purpose_ref: str = "purpose:test", **kw: Any) -> dict[str, Any]:
    """Get arguments; pass ``max_packet_bytes`` as a keyword."""
    return {"record_id": record_id, "purpose_ref": purpose_ref, **kw}


def make_request_admission_args(candidate_id: str, idempotency_key: str | None = None) -> dict[str, Any]:
    """Request-admission arguments; the key defaults to one derived from the candidate."""
    if idempotency_key is None:
        idempotency_key = idempotency_key_for("request_admission", candidate_id)
    return {"candidate_id": candidate_id, "idempotency_key": idempotency_key}


def make_withdraw_args(
    candidate_id: str, idempotency_key: str | None = None, reason_ref: str = "reason:no-longer-needed"
) -> dict[str, Any]:
    """Withdraw arguments (the host must also attach a confirmation)."""
    if idempotency_key is None:
        idempotency_key = idempotency_key_for("withdraw", candidate_id)
    return {"candidate_id": candidate_id, "idempotency_key": idempotency_key, "reason_ref": reason_ref}


def make_forget_args(
    record_id: str, idempotency_key: str | None = None, reason_ref: str = "reason:outdated"
) -> dict[str, Any]:
    """Forget arguments (the host must also attach a confirmation)."""
    if idempotency_key is None:
        idempotency_key = idempotency_key_for("forget", record_id)
    return {"record_id": record_id, "idempotency_key": idempotency_key, "reason_ref": reason_ref}
