"""Digests (SPEC §8): ``"sha256:" + hex(SHA-256(b"engram/<kind>/v1" + 0x00 + JCS(value)))``.

Every receipt carries its own digest over itself minus that field (:func:`with_digest`).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from engram_core.canonical import canonicalize

KINDS: frozenset[str] = frozenset(
    {
        "payload", "record", "capture-identity", "operation", "journal-event", "transaction",
        "decision", "authorization", "revalidation", "redaction", "rank", "read", "packet",
        "response", "coverage", "key-destruction",
        # This project's additions: page cursors and scope digests used in logs and metrics.
        "cursor", "scope", "policy",
    }
)

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")


def digest_bytes(kind: str, value: object) -> bytes:
    if kind not in KINDS:
        raise ValueError(f"unknown digest kind: {kind}")
    return hashlib.sha256(f"engram/{kind}/v1".encode("ascii") + b"\x00" + canonicalize(value)).digest()


def digest(kind: str, value: object) -> str:
    """The ``sha256:<hex>`` digest of ``value`` under the domain ``engram/<kind>/v1``."""
    return "sha256:" + digest_bytes(kind, value).hex()


def operation_digest(tool: str, arguments: dict[str, Any]) -> str:
    """The mutation gate's and the confirmation's operation digest (SPEC §2, §7)."""
    return digest("operation", {"tool": tool, "arguments": arguments})


def capture_identity_digest(tenant: str, workspace: str, principal: str, idempotency_key: str) -> str:
    """The idempotency identity of a mutation; a capture's candidate_id is derived from it."""
    return digest(
        "capture-identity",
        {"scope": {"tenant": tenant, "workspace": workspace}, "principal": principal,
         "idempotency_key": idempotency_key},
    )


def scope_digest(tenant: str, workspace: str) -> str:
    """A stable, non-reversible name of a scope for logs, metrics and partition keys."""
    return digest("scope", {"tenant": tenant, "workspace": workspace})


def with_digest(kind: str, obj: dict[str, Any], field: str) -> dict[str, Any]:
    """A copy of ``obj`` with ``obj[field]`` = the digest of ``obj`` minus ``field``."""
    body = {k: v for k, v in obj.items() if k != field}
    return {**body, field: digest(kind, body)}


def canonical_with_digest(kind: str, obj: dict[str, Any], field: str) -> bytes:
    """``canonicalize(with_digest(kind, obj, field))`` from one serialisation of ``obj``.

    When ``field`` sorts after every key of ``obj`` (ASCII keys: JCS orders by UTF-16 code
    units, which for ASCII is Python's string order), the digest member is the last one, so
    it is appended to the canonical body that was hashed. Otherwise it serialises again.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown digest kind: {kind}")
    if field in obj:
        raise ValueError("the digest field is already set")
    body = canonicalize(obj)
    value = "sha256:" + hashlib.sha256(f"engram/{kind}/v1".encode("ascii") + b"\x00" + body).hexdigest()
    if not (field.isascii() and field.isidentifier() and all(k.isascii() and k < field for k in obj)):
        return canonicalize({**obj, field: value})
    tail = f'"{field}":"{value}"}}'.encode("ascii")
    return b"{" + tail if body == b"{}" else body[:-1] + b"," + tail


def verify_digest_field(kind: str, obj: dict[str, Any], field: str) -> bool:
    if field not in obj:
        return False
    body = {k: v for k, v in obj.items() if k != field}
    return obj[field] == digest(kind, body)


def is_digest(value: object) -> bool:
    return isinstance(value, str) and DIGEST_RE.match(value) is not None


def digest_hex_bytes(value: str) -> bytes:
    """The 32 raw bytes of a ``sha256:<hex>`` digest."""
    if not is_digest(value):
        raise ValueError("not a sha256 digest")
    return bytes.fromhex(value[len("sha256:"):])
