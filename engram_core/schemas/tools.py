"""The six MCP tool definitions (SPEC §1, §3, §4, §5): closed input schemas, envelope output
schemas, MCP annotations and gate metadata.

Schemas are JSON Schema draft 2020-12 and are built once at import time; treat them as
read-only. Conventions used in every input schema:

* Every object is closed (``additionalProperties: false``); optional fields are omitted, never
  ``null``.
* Byte bounds are UTF-8 bytes. JSON Schema's ``minLength``/``maxLength`` count code points, so a
  byte bound ``[lo, hi]`` is published as ``minLength = ceil(lo / 4)`` and ``maxLength = hi``
  (loose but never stricter than the byte bound) plus the exact custom annotations
  ``x-engram-minBytes`` / ``x-engram-maxBytes``, which :mod:`engram_core.schemas.validate`
  enforces.
* ``x-engram-nfc: true`` at the root: every string (keys and values) must already be in Unicode
  NFC (checked, never normalised).
* ``x-engram-instant: true``: a ``YYYY-MM-DDTHH:mm:ss.sssZ`` UTC instant that must also be
  calendar-valid (the ``pattern`` alone admits e.g. February 30).
* Integers are JSON integers only: ``10.0`` is rejected (``x-engram-integerOnly`` at the root),
  and so are booleans. Epoch values are safe integers, ±(2^53 − 1).
* ``x-engram-strictlyAscending: "codepoint"``: array items strictly ascending by Unicode code
  point order (identical to UTF-8 byte order).
* ``x-engram-maxSerializedBytes``: the RFC 8785 canonical form of the whole arguments object is
  at most this many UTF-8 bytes.
* Cross-field rules that JSON Schema cannot express (capture cross-references, ``t_end ≥ t``,
  ``expires_at`` strictly after now) are listed in ``x-engram-rules`` and in the descriptions.

The validator treats a malformed digest string (``content_digest``, ``evidence_digest``) as
``INVALID_DIGEST`` only when nothing else is wrong with the arguments; otherwise the answer is
``INVALID_SCHEMA``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engram_core.errors import Code

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

TOOL_NAMES: tuple[str, ...] = (
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_capture",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
    "engram_memory_forget",
)

# ---------------------------------------------------------------------------------------------
# Bounds (SPEC §3, §5). Exported so that other modules and tests use the same numbers.

MAX_ARGUMENTS_BYTES = 1_048_576
SAFE_INT = 2**53 - 1
REF_MIN_BYTES, REF_MAX_BYTES = 1, 512
QUERY_MIN_BYTES, QUERY_MAX_BYTES = 1, 8192
TEXT_MIN_BYTES, TEXT_MAX_BYTES = 1, 65536
ATTESTATION_MIN_BYTES, ATTESTATION_MAX_BYTES = 1, 4096
IDEMPOTENCY_KEY_MIN_BYTES, IDEMPOTENCY_KEY_MAX_BYTES = 16, 256
PAGE_CURSOR_MIN_BYTES, PAGE_CURSOR_MAX_BYTES = 1, 4096
ID_MAX_BYTES = 512
LIMIT_MIN, LIMIT_MAX, LIMIT_DEFAULT = 1, 50, 10
PACKET_MIN, PACKET_MAX, PACKET_DEFAULT = 4096, 1_048_576, 65536
COMPONENTS_MIN, COMPONENTS_MAX = 1, 64
CITATION_IDS_MIN, CITATION_IDS_MAX = 1, 256
CITATIONS_MIN, CITATIONS_MAX = 1, 256
FAMILY_REFS_MIN, FAMILY_REFS_MAX = 1, 64
CAPTURE_SCHEMA_VERSION = 2
OUTPUT_SCHEMA_VERSION = 1

DIGEST_PATTERN = "^sha256:[0-9a-f]{64}$"
INSTANT_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"
RECORD_ID_PATTERN = "^mem_[a-z2-7]+$"
CANDIDATE_ID_PATTERN = "^cand_[a-z2-7]+$"
# What the service emits (SPEC §3): 52 base32 characters of a 32-byte digest.
RECORD_ID_OUT_PATTERN = "^mem_[a-z2-7]{52}$"
CANDIDATE_ID_OUT_PATTERN = "^cand_[a-z2-7]{52}$"
CURSOR_PATTERN = "^(0|[1-9][0-9]*)$"

DEFAULT_CAPABILITY_POLICY = {"minimum_channels": "lexical", "network": "forbid"}
DEFAULT_RETENTION = {"derivative_rule": "make-ineligible"}

# Names the host binds (SPEC §1.1, seed §0). Never valid as an argument key at any level.
HOST_BOUND_NAMES: frozenset[str] = frozenset(
    {
        "tenant",
        "workspace",
        "scope",
        "principal",
        "agent_id",
        "session",
        "credential",
        "audit_id",
        "auditId",
        "deadline",
        "cancellation",
        "confirmation",
        "elicitationRef",
        "confirmed",
    }
)

# Fields whose malformed string value is INVALID_DIGEST (when nothing else is wrong).
DIGEST_FIELDS: frozenset[str] = frozenset({"content_digest", "evidence_digest"})


# ---------------------------------------------------------------------------------------------
# Schema building blocks. Each call returns a fresh dict so no two places share mutable state.


def _bytes_string(lo: int, hi: int, description: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": math.ceil(lo / 4),
        "maxLength": hi,
        "x-engram-minBytes": lo,
        "x-engram-maxBytes": hi,
        "description": f"{description} NFC; {lo}..{hi} UTF-8 bytes (minLength/maxLength count code points and are looser).",
        **extra,
    }


def _ref(description: str) -> dict[str, Any]:
    return _bytes_string(REF_MIN_BYTES, REF_MAX_BYTES, f"Opaque reference: {description}.")


def _digest(description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": DIGEST_PATTERN,
        "description": f"{description} Format: 'sha256:' + 64 lowercase hex (malformed: INVALID_DIGEST).",
    }


def _instant(description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": INSTANT_PATTERN,
        "x-engram-instant": True,
        "description": f"{description} UTC instant YYYY-MM-DDTHH:mm:ss.sssZ, exactly millisecond precision, calendar-valid.",
    }


def _safe_int(description: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": -SAFE_INT,
        "maximum": SAFE_INT,
        "description": f"{description} JSON integer (not 10.0, not a boolean) in ±(2^53−1).",
    }


def _idempotency_key() -> dict[str, Any]:
    return _bytes_string(
        IDEMPOTENCY_KEY_MIN_BYTES,
        IDEMPOTENCY_KEY_MAX_BYTES,
        "One key per logical operation, scoped to your principal; record it before calling and reuse it on retry (use at least 16 ASCII characters).",
    )


def _record_id_in() -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": RECORD_ID_PATTERN,
        "minLength": 5,
        "maxLength": ID_MAX_BYTES,
        "x-engram-maxBytes": ID_MAX_BYTES,
        "description": "A record_id exactly as returned ('mem_' + lowercase base32, at most 512 bytes; the service issues 52 base32 characters).",
    }


def _candidate_id_in() -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": CANDIDATE_ID_PATTERN,
        "minLength": 6,
        "maxLength": ID_MAX_BYTES,
        "x-engram-maxBytes": ID_MAX_BYTES,
        "description": "A candidate_id exactly as returned by capture ('cand_' + lowercase base32, at most 512 bytes; the service issues 52 base32 characters).",
    }


def _max_packet_bytes() -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": PACKET_MIN,
        "maximum": PACKET_MAX,
        "default": PACKET_DEFAULT,
        "description": f"Budget for the canonical size of the result value, {PACKET_MIN}..{PACKET_MAX} (default {PACKET_DEFAULT}). JSON integer only.",
    }


def _obj(properties: dict[str, Any], required: list[str], description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if description:
        out["description"] = description
    return out


def _root(properties: dict[str, Any], required: list[str], rules: list[str]) -> dict[str, Any]:
    schema = {"$schema": JSON_SCHEMA_DIALECT, **_obj(properties, required)}
    schema["x-engram-nfc"] = True
    schema["x-engram-integerOnly"] = True
    schema["x-engram-maxSerializedBytes"] = MAX_ARGUMENTS_BYTES
    schema["x-engram-hostBoundNames"] = sorted(HOST_BOUND_NAMES)
    if rules:
        schema["x-engram-rules"] = rules
    return schema


# ---------------------------------------------------------------------------------------------
# Input schemas


def _search_input() -> dict[str, Any]:
    return _root(
        {
            "query": _bytes_string(QUERY_MIN_BYTES, QUERY_MAX_BYTES, "What to look for, in plain words."),
            "purpose_ref": _ref("the purpose the host bound for this call (must match it exactly)"),
            "limit": {
                "type": "integer",
                "minimum": LIMIT_MIN,
                "maximum": LIMIT_MAX,
                "default": LIMIT_DEFAULT,
                "description": f"Maximum packets on this page, {LIMIT_MIN}..{LIMIT_MAX} (default {LIMIT_DEFAULT}). JSON integer only.",
            },
            "max_packet_bytes": _max_packet_bytes(),
            "capability_policy": _obj(
                {
                    "minimum_channels": {
                        "type": "string",
                        "enum": ["lexical", "lexical_and_semantic"],
                        "description": "'lexical_and_semantic' requires the semantic channel (RANKING_UNAVAILABLE when it is down; never a silent lexical fallback).",
                    },
                    "network": {
                        "type": "string",
                        "enum": ["forbid", "allow"],
                        "description": "'allow' grants nothing by itself: a network channel is used only if the operator configured one.",
                    },
                },
                ["minimum_channels", "network"],
                "Ranking channel policy; both members are required when the object is given. Omitted: lexical / forbid.",
            ),
            "page_cursor": _bytes_string(
                PAGE_CURSOR_MIN_BYTES,
                PAGE_CURSOR_MAX_BYTES,
                "The previous answer's next_page_cursor, copied exactly; send the same query and parameters.",
            ),
        },
        ["query", "purpose_ref"],
        [],
    )


def _get_input() -> dict[str, Any]:
    return _root(
        {
            "record_id": _record_id_in(),
            "purpose_ref": _ref("the purpose the host bound for this call (must match it exactly)"),
            "max_packet_bytes": _max_packet_bytes(),
        },
        ["record_id", "purpose_ref"],
        [],
    )


CAPTURE_RULES: tuple[str, ...] = (
    "payload.components[*].component_id are unique",
    "payload.citations[*].citation_id are unique",
    "every payload.components[*].citation_ids[*] names a payload.citations[*].citation_id",
    "payload.primary_component_id names a payload.components[*].component_id",
    "payload.primary_event.citation_id names a payload.citations[*].citation_id and is in the primary component's citation_ids",
    "every evidence.citation_ids[*] names a payload.citations[*].citation_id",
    "payload.valid_time.t_end >= payload.valid_time.t when given",
    "payload.retention.expires_at is strictly after now (the scope's cap is checked later: UNAUTHORIZED)",
)


def _capture_input() -> dict[str, Any]:
    citation_ids = {
        "type": "array",
        "items": _ref("a citation_id of payload.citations"),
        "minItems": CITATION_IDS_MIN,
        "maxItems": CITATION_IDS_MAX,
        "uniqueItems": True,
    }
    component = _obj(
        {
            "component_id": _ref("this component's id, unique within the payload"),
            "kind": {"type": "string", "enum": ["context", "decision", "evidence"]},
            "text": _bytes_string(TEXT_MIN_BYTES, TEXT_MAX_BYTES, "The component's content."),
            "citation_ids": {
                **citation_ids,
                "description": f"{CITATION_IDS_MIN}..{CITATION_IDS_MAX} unique ids, each resolving into payload.citations.",
            },
        },
        ["component_id", "kind", "text", "citation_ids"],
    )
    citation = _obj(
        {
            "citation_id": _ref("this citation's id, unique within the payload"),
            "source_ref": _ref("where the cited material comes from"),
            "locator": _obj(
                {"scheme": _ref("locator scheme"), "value": _ref("locator value")},
                ["scheme", "value"],
                "Where inside the source the cited material is.",
            ),
            "content_digest": _digest("sha256 digest of the cited content."),
            "observed_at": _instant("When the cited content was observed."),
        },
        ["citation_id", "source_ref", "locator", "content_digest"],
    )
    payload = _obj(
        {
            "schema_version": {"type": "integer", "const": CAPTURE_SCHEMA_VERSION},
            "purpose_ref": _ref("the purpose the host bound for this call (must match it exactly)"),
            "valid_time": _obj(
                {
                    "t": _safe_int("Start of validity, epoch milliseconds."),
                    "t_end": _safe_int("End of validity, epoch milliseconds; t_end >= t."),
                },
                ["t"],
                "When the captured fact holds, epoch milliseconds (other units make a record that is never current).",
            ),
            "components": {
                "type": "array",
                "items": component,
                "minItems": COMPONENTS_MIN,
                "maxItems": COMPONENTS_MAX,
                "description": f"{COMPONENTS_MIN}..{COMPONENTS_MAX} components; component_id values unique.",
            },
            "primary_component_id": _ref("the component_id of the primary component"),
            "primary_event": _obj(
                {
                    "at": _safe_int("When the event happened (epoch milliseconds)."),
                    "type_ref": _ref("the event type"),
                    "citation_id": _ref("a citation in payload.citations that the primary component also cites"),
                },
                ["at", "type_ref", "citation_id"],
            ),
            "citations": {
                "type": "array",
                "items": citation,
                "minItems": CITATIONS_MIN,
                "maxItems": CITATIONS_MAX,
                "description": f"{CITATIONS_MIN}..{CITATIONS_MAX} citations; citation_id values unique.",
            },
            "retention": _obj(
                {
                    "derivative_rule": {
                        "type": "string",
                        "enum": ["retain", "make-ineligible"],
                        "description": "'retain' needs the scope's permission (else UNAUTHORIZED).",
                    },
                    "expires_at": _instant(
                        "When the record expires: strictly after now (else INVALID_SCHEMA) and within the scope's cap (else UNAUTHORIZED)."
                    ),
                },
                ["derivative_rule"],
                "Omit unless instructed; omitted means {derivative_rule: 'make-ineligible'}.",
            ),
            "reconciliation": _obj(
                {
                    "family_refs": {
                        "type": "array",
                        "items": _ref("a reconciliation family"),
                        "minItems": FAMILY_REFS_MIN,
                        "maxItems": FAMILY_REFS_MAX,
                        "uniqueItems": True,
                        "x-engram-strictlyAscending": "codepoint",
                        "description": f"{FAMILY_REFS_MIN}..{FAMILY_REFS_MAX} refs, strictly ascending by Unicode code point (= UTF-8 byte order); each family needs the scope's consent (else UNAUTHORIZED). Omit reconciliation instead of sending an empty list.",
                    }
                },
                ["family_refs"],
            ),
        },
        [
            "schema_version",
            "purpose_ref",
            "valid_time",
            "components",
            "primary_component_id",
            "primary_event",
            "citations",
        ],
    )
    evidence = _obj(
        {
            "evidence_ref": _ref("the evidence supporting this capture"),
            "evidence_digest": _digest("sha256 digest of the evidence."),
            "citation_ids": {
                **citation_ids,
                "description": f"{CITATION_IDS_MIN}..{CITATION_IDS_MAX} unique ids, each resolving into payload.citations.",
            },
            "attestation": _bytes_string(
                ATTESTATION_MIN_BYTES, ATTESTATION_MAX_BYTES, "Optional attestation (verified by the service, never trusted as given)."
            ),
        },
        ["evidence_ref", "evidence_digest", "citation_ids"],
    )
    return _root(
        {"idempotency_key": _idempotency_key(), "payload": payload, "evidence": evidence},
        ["idempotency_key", "payload", "evidence"],
        list(CAPTURE_RULES),
    )


def _request_admission_input() -> dict[str, Any]:
    return _root(
        {"candidate_id": _candidate_id_in(), "idempotency_key": _idempotency_key()},
        ["candidate_id", "idempotency_key"],
        [],
    )


def _withdraw_input() -> dict[str, Any]:
    return _root(
        {
            "candidate_id": _candidate_id_in(),
            "idempotency_key": _idempotency_key(),
            "reason_ref": _ref("why the candidate is withdrawn"),
        },
        ["candidate_id", "idempotency_key", "reason_ref"],
        [],
    )


def _forget_input() -> dict[str, Any]:
    return _root(
        {
            "record_id": _record_id_in(),
            "idempotency_key": _idempotency_key(),
            "reason_ref": _ref("why the record is forgotten"),
        },
        ["record_id", "idempotency_key", "reason_ref"],
        [],
    )


# ---------------------------------------------------------------------------------------------
# Output schemas: the SPEC §4 envelope around each tool's value schema.


def _out_digest() -> dict[str, Any]:
    return {"type": "string", "pattern": DIGEST_PATTERN}


def _out_cursor() -> dict[str, Any]:
    return {"type": "string", "pattern": CURSOR_PATTERN, "description": "Journal cursor, canonical unsigned decimal."}


def _out_instant() -> dict[str, Any]:
    return {"type": "string", "pattern": INSTANT_PATTERN}


def _out_obj(properties: dict[str, Any], required: list[str], *, closed: bool = True, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if closed:
        out["additionalProperties"] = False
    out.update(extra)
    return out


def _out_record() -> dict[str, Any]:
    # Open: the scope's redaction allowlist decides which top-level fields leave (SPEC §9).
    return _out_obj(
        {
            "record_id": {"type": "string", "pattern": RECORD_ID_OUT_PATTERN},
            "record_digest": _out_digest(),
        },
        ["record_id"],
        closed=False,
        description="The redacted record; record_id is always present, redacted_fields lists what was removed.",
    )


def _redacted_fields() -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string"},
        "description": "Removed top-level fields as sorted JSON pointers.",
    }


def _search_value() -> dict[str, Any]:
    packet = _out_obj(
        {
            "record": _out_record(),
            "redacted_fields": _redacted_fields(),
            "redaction_receipt_digest": _out_digest(),
            "score": {"type": "number", "minimum": 0, "maximum": 1},
            "rank": {"type": "integer", "minimum": 1, "description": "1-based position in the full ranking."},
        },
        ["record", "redacted_fields", "redaction_receipt_digest", "score", "rank"],
    )
    return _out_obj(
        {
            "records": {"type": "array", "items": packet, "description": "Empty means no match."},
            "rank_receipt": _out_obj(
                {"receipt_digest": _out_digest()},
                ["receipt_digest"],
                closed=False,
                description="Ranking receipt (SPEC §9): request digest, profile and config digest, channels and index cursors, system_as_of, valid_as_of, candidate count, ordered-ids digest, issued_at, receipt_digest.",
            ),
            "next_page_cursor": {"type": "string", "minLength": 1},
            "response_digest": _out_digest(),
        },
        ["records", "rank_receipt", "response_digest"],
    )


def _get_value() -> dict[str, Any]:
    read_receipt = _out_obj(
        {
            "record_id": {"type": "string", "pattern": RECORD_ID_OUT_PATTERN},
            "record_digest": _out_digest(),
            "valid_as_of": {"type": "integer", "minimum": -SAFE_INT, "maximum": SAFE_INT},
            "system_as_of": _out_cursor(),
            "validated_through_cursor": _out_cursor(),
            "authorization_receipt_digest": _out_digest(),
            "revalidation_receipt_digest": _out_digest(),
            "checked_at": _out_instant(),
            "receipt_digest": _out_digest(),
        },
        [
            "record_id",
            "record_digest",
            "valid_as_of",
            "system_as_of",
            "validated_through_cursor",
            "authorization_receipt_digest",
            "revalidation_receipt_digest",
            "checked_at",
            "receipt_digest",
        ],
    )
    return _out_obj(
        {
            "record": _out_record(),
            "redacted_fields": _redacted_fields(),
            "redaction_receipt_digest": _out_digest(),
            "read_receipt": read_receipt,
            "packet_digest": _out_digest(),
        },
        ["record", "redacted_fields", "redaction_receipt_digest", "read_receipt", "packet_digest"],
    )


def _capture_value() -> dict[str, Any]:
    return _out_obj(
        {
            "status": {"type": "string", "enum": ["committed_pending", "duplicate_exact"]},
            "candidate_id": {"type": "string", "pattern": CANDIDATE_ID_OUT_PATTERN},
            "record_digest": _out_digest(),
            "cursor": _out_cursor(),
            "transaction_receipt_digest": _out_digest(),
        },
        ["status", "candidate_id", "record_digest", "cursor", "transaction_receipt_digest"],
    )


def _request_admission_value() -> dict[str, Any]:
    outcome = _out_obj(
        {
            "status": {"type": "string", "enum": ["accepted", "rejected", "pending_adjudication", "duplicate_exact"]},
            "candidate_id": {"type": "string", "pattern": CANDIDATE_ID_OUT_PATTERN},
            "record_id": {"type": "string", "pattern": RECORD_ID_OUT_PATTERN},
            "cursor": _out_cursor(),
            "decision_receipt_digest": _out_digest(),
            "transaction_receipt_digest": _out_digest(),
        },
        ["status", "candidate_id", "cursor", "decision_receipt_digest", "transaction_receipt_digest"],
        allOf=[
            {
                "if": {"properties": {"status": {"enum": ["accepted", "duplicate_exact"]}}, "required": ["status"]},
                "then": {"required": ["record_id"]},
            }
        ],
    )
    return _out_obj({"outcome": outcome, "replayed": {"type": "boolean"}}, ["outcome", "replayed"])


def _transition_receipt(operation: str, from_state: dict[str, Any], to_state: str) -> dict[str, Any]:
    return _out_obj(
        {
            "event_id": {"type": "string", "minLength": 1},
            "operation": {"type": "string", "const": operation},
            "from_state": from_state,
            "to_state": {"type": "string", "const": to_state},
            "cursor": _out_cursor(),
            "event_digest": _out_digest(),
            "authorization_receipt_digest": _out_digest(),
            "transaction_receipt_digest": _out_digest(),
        },
        [
            "event_id",
            "operation",
            "from_state",
            "to_state",
            "cursor",
            "event_digest",
            "authorization_receipt_digest",
            "transaction_receipt_digest",
        ],
    )


def _withdraw_value() -> dict[str, Any]:
    return _out_obj(
        {
            "receipt": _transition_receipt("withdraw", {"type": "string", "const": "pending"}, "withdrawn"),
            "replayed": {"type": "boolean"},
            "key_destruction": {"type": "string", "enum": ["pending", "complete"]},
        },
        ["receipt", "replayed", "key_destruction"],
    )


def _forget_value() -> dict[str, Any]:
    from_state = {
        "type": "string",
        "enum": ["accepted_current", "accepted_disputed", "historical", "expired", "trust_invalid"],
    }
    return _out_obj(
        {
            "receipt": _transition_receipt("tombstone", from_state, "tombstoned"),
            "replayed": {"type": "boolean"},
            "projection_invalidation": {"type": "string", "enum": ["pending", "complete"]},
            "coverage_receipt_digest": _out_digest(),
        },
        ["receipt", "replayed", "projection_invalidation"],
        allOf=[
            {
                "if": {"properties": {"projection_invalidation": {"const": "complete"}}, "required": ["projection_invalidation"]},
                "then": {"required": ["coverage_receipt_digest"]},
                "else": {"not": {"required": ["coverage_receipt_digest"]}},
            }
        ],
    )


ERROR_CODES: tuple[str, ...] = tuple(code.value for code in Code)


def envelope_schema(value_schema: dict[str, Any]) -> dict[str, Any]:
    """The SPEC §4 envelope (success or failure) around ``value_schema``."""
    success = _out_obj(
        {
            "ok": {"const": True},
            "output": _out_obj(
                {"schema_version": {"const": OUTPUT_SCHEMA_VERSION}, "value": value_schema},
                ["schema_version", "value"],
            ),
            "auditId": {"type": "string"},
            "redactionClass": {"const": "high"},
        },
        ["ok", "output", "auditId", "redactionClass"],
    )
    failure = _out_obj(
        {
            "ok": {"const": False},
            "auditId": {"type": "string"},
            "redactionClass": {"const": "high"},
            "error": _out_obj(
                {
                    "code": {"type": "string", "enum": list(ERROR_CODES)},
                    "message": {"type": "string"},
                    "retriable": {"type": "boolean"},
                },
                ["code", "message", "retriable"],
            ),
        },
        ["ok", "auditId", "redactionClass", "error"],
    )
    return {"$schema": JSON_SCHEMA_DIALECT, "type": "object", "oneOf": [success, failure]}


# ---------------------------------------------------------------------------------------------
# Tool descriptions (model-facing).

_COMMON = (
    " Every result is an envelope: {ok: true, output: {schema_version: 1, value}, auditId, redactionClass} or"
    " {ok: false, ..., error: {code, message, retriable}}; branch on error.code and error.retriable, never on the"
    " message. The schema is closed: never send tenant, workspace, principal, session, confirmation or any field"
    " not listed, and omit optional fields instead of sending null (INVALID_SCHEMA). Byte bounds are UTF-8 bytes;"
    " every string must already be NFC."
)

_MUTATION = (
    " Mutation: choose one idempotency_key (16..256 bytes) per logical operation, record it before calling, and on"
    " a retriable error or MUTATION_OUTCOME_UNKNOWN retry with the same key and identical arguments. Same key with"
    " other content, target or tool: DIGEST_CONFLICT."
)

_DESCRIPTIONS: dict[str, str] = {
    "engram_memory_search": (
        "Find current memories (decisions with rationale, verified facts with a citable source, conventions, recurring"
        " pitfalls and fixes, handover facts) with citations and a rank receipt. Search before you capture: if an"
        " equivalent current record exists, cite its record_id instead of capturing again. Only accepted, currently"
        " valid records of your scope are returned; an empty records list means no match. Send purpose_ref exactly as"
        " the host bound it. To page, send the previous next_page_cursor with the same query and parameters; on"
        " STALE_PAGE search again without page_cursor. RANKING_UNAVAILABLE: a required semantic channel is down (retry,"
        " or ask for lexical). PROJECTION_OVERSIZED / RESULT_TOO_LARGE: lower limit or raise max_packet_bytes within"
        " bounds."
    )
    + _COMMON,
    "engram_memory_get": (
        "Read one known current record by record_id (copied exactly as returned), without ranking, with a read receipt."
        " NOT_FOUND means unknown, outside your scope or not currently eligible; these are deliberately"
        " indistinguishable, so do not probe variants. A candidate_id is not a record_id."
    )
    + _COMMON,
    "engram_memory_capture": (
        "Submit cited, durable, reusable knowledge as an encrypted pending candidate (not searchable or readable until"
        " admitted; then call engram_memory_request_admission). Do not capture temporary or in-progress state, chat"
        " transcripts, raw tool output, task notes, speculation, or anything secret: credentials, tokens, API or"
        " signing keys, passwords, connection strings, .env values, session cookies, host context or confirmation"
        " tokens. Every component cites at least one citation; primary_event.citation_id must be cited by the primary"
        " component; evidence.citation_ids must resolve into payload.citations. valid_time is in epoch milliseconds."
        " Omit retention unless instructed (default make-ineligible; retain needs permission). duplicate_exact is a"
        " replay of the same key with identical content, not semantic deduplication. Digests are 'sha256:' + 64"
        " lowercase hex (INVALID_DIGEST when malformed)."
    )
    + _MUTATION
    + _COMMON,
    "engram_memory_request_admission": (
        "Ask the scope's admission policy to decide a pending candidate from engram_memory_capture. You cannot decide"
        " it yourself: report the outcome exactly. accepted (and duplicate_exact, meaning an identical current record"
        " already exists) carry record_id; rejected and pending_adjudication are successful outcomes, not errors."
        " Interpret outcome.status and replayed, not the presence of fields. Never rephrase forgotten content to get"
        " around pending_adjudication. A repeat on a decided candidate returns the recorded decision with"
        " replayed: true."
    )
    + _MUTATION
    + _COMMON,
    "engram_memory_withdraw": (
        "End a pending candidate you captured (destroys its data key). Always needs a human confirmation that the"
        " host obtains and binds; you cannot confirm on your own behalf (a 'confirmed' argument is INVALID_SCHEMA)."
        " gate_failed: the confirmation is not valid, ask the human via the host. Only pending candidates:"
        " ILLEGAL_TRANSITION for an accepted one, ALREADY_TERMINAL for a rejected or withdrawn one; do not loop."
    )
    + _MUTATION
    + _COMMON,
    "engram_memory_forget": (
        "Make an admitted record permanently ineligible (tombstone): it leaves search and get at once, its data key"
        " is destroyed and derived projections are invalidated asynchronously. Always needs a human confirmation that"
        " the host obtains and binds; you cannot confirm on your own behalf. gate_failed: ask the human via the host."
        " ALREADY_TERMINAL: already forgotten."
    )
    + _MUTATION
    + _COMMON,
}

_TITLES: dict[str, str] = {
    "engram_memory_search": "Search memory",
    "engram_memory_get": "Get a memory record",
    "engram_memory_capture": "Capture a memory candidate",
    "engram_memory_request_admission": "Request admission of a candidate",
    "engram_memory_withdraw": "Withdraw a pending candidate",
    "engram_memory_forget": "Forget a memory record",
}


@dataclass(frozen=True)
class ToolDef:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: dict[str, Any]
    mutation: bool
    confirmation_always: bool
    target_field: str | None


def _annotations(*, read_only: bool, destructive: bool) -> dict[str, Any]:
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": True,
        "openWorldHint": False,
    }


def _tool(
    name: str,
    input_schema: dict[str, Any],
    value_schema: dict[str, Any],
    *,
    read_only: bool,
    destructive: bool,
    confirmation_always: bool,
    target_field: str | None,
) -> ToolDef:
    return ToolDef(
        name=name,
        title=_TITLES[name],
        description=_DESCRIPTIONS[name],
        input_schema=input_schema,
        output_schema=envelope_schema(value_schema),
        annotations=_annotations(read_only=read_only, destructive=destructive),
        mutation=not read_only,
        confirmation_always=confirmation_always,
        target_field=target_field,
    )


TOOLS: dict[str, ToolDef] = {
    t.name: t
    for t in (
        _tool("engram_memory_search", _search_input(), _search_value(), read_only=True, destructive=False,
              confirmation_always=False, target_field=None),
        _tool("engram_memory_get", _get_input(), _get_value(), read_only=True, destructive=False,
              confirmation_always=False, target_field="record_id"),
        _tool("engram_memory_capture", _capture_input(), _capture_value(), read_only=False, destructive=False,
              confirmation_always=False, target_field=None),
        _tool("engram_memory_request_admission", _request_admission_input(), _request_admission_value(),
              read_only=False, destructive=False, confirmation_always=False, target_field="candidate_id"),
        _tool("engram_memory_withdraw", _withdraw_input(), _withdraw_value(), read_only=False, destructive=True,
              confirmation_always=True, target_field="candidate_id"),
        _tool("engram_memory_forget", _forget_input(), _forget_value(), read_only=False, destructive=True,
              confirmation_always=True, target_field="record_id"),
    )
}

if tuple(TOOLS) != TOOL_NAMES:  # pragma: no cover - import-time consistency guard
    raise RuntimeError("TOOLS and TOOL_NAMES disagree")
