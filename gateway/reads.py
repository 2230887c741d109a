"""engram_memory_get: the redacted packet with its read receipt (SPEC §5, §8, §9)."""

from __future__ import annotations

import json
from typing import Any

from engram_api.storage.v1 import storage_pb2
from engram_core.canonical import canonicalize
from engram_core.digests import digest, scope_digest, with_digest
from engram_core.errors import Code, EngramError
from engram_core.policy import ScopePolicy
from engram_core.redaction import redact, redaction_receipt
from engram_core.timefmt import format_instant, now_ms
from engram_core.host_context import InvocationContext


def build_get_value(
    reply: storage_pb2.GetRecordResponse,
    ctx: InvocationContext,
    policy: ScopePolicy,
    max_packet_bytes: int,
) -> dict[str, Any]:
    """Redact the record with the scope's allowlist, issue the receipts, check the budget."""
    record = json.loads(reply.record_json)
    allowlist = policy.redaction_allowlist
    projected, redacted_fields = redact(record, allowlist)
    redaction = redaction_receipt(record["record_id"], redacted_fields, allowlist)
    checked_at = format_instant(now_ms())
    authorization = with_digest(
        "authorization",
        {
            "tool": "engram_memory_get",
            "scope_digest": scope_digest(ctx.tenant, ctx.workspace),
            "principal_digest": digest("authorization", {"principal": ctx.principal}),
            "purpose_ref": ctx.purpose_ref,
            "audit_id": ctx.audit_id,
            "checked_at": checked_at,
        },
        "receipt_digest",
    )
    revalidation = with_digest(
        "revalidation",
        {
            "record_id": record["record_id"],
            "record_digest": reply.record_digest,
            "state": "accepted_current",
            "validated_through_cursor": reply.validated_through_cursor,
            "checked_at": checked_at,
        },
        "receipt_digest",
    )
    read_receipt = with_digest(
        "read",
        {
            "record_id": record["record_id"],
            "record_digest": reply.record_digest,
            "valid_as_of": reply.valid_as_of_ms,
            "system_as_of": reply.system_as_of,
            "validated_through_cursor": reply.validated_through_cursor,
            "authorization_receipt_digest": authorization["receipt_digest"],
            "revalidation_receipt_digest": revalidation["receipt_digest"],
            "checked_at": checked_at,
        },
        "receipt_digest",
    )
    packet = {
        "record": projected,
        "redacted_fields": redacted_fields,
        "redaction_receipt_digest": redaction["receipt_digest"],
        "read_receipt": read_receipt,
    }
    value = {**packet, "packet_digest": digest("packet", packet)}
    if len(canonicalize(value)) > max_packet_bytes:
        raise EngramError(Code.PROJECTION_OVERSIZED)
    return value
