"""The tool result envelope (SPEC §4)."""

from __future__ import annotations

from typing import Any

from engram_core.errors import EngramError


def success(value: object, audit_id: str) -> dict[str, Any]:
    return {"ok": True, "output": {"schema_version": 1, "value": value}, "auditId": audit_id, "redactionClass": "high"}


def failure(error: EngramError, audit_id: str) -> dict[str, Any]:
    return {"ok": False, "auditId": audit_id, "redactionClass": "high", "error": error.to_json()}
