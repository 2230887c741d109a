"""The operator policy of a scope (SPEC §1.4, §5 retention, §10, §12) and the capture-time
rules it drives.

A policy document (canonical JSON on the wire):

| member | meaning (default) |
|---|---|
| ``enabled`` | memory on for the scope (``false``: memory is off by default) |
| ``tools`` | tool names granted in the scope (``[]`` while disabled) |
| ``confirmation_required`` | capture / request_admission needing a confirmation (``[]``) |
| ``admission`` | ``{"mode": "auto_accept" | "require_adjudication" | "reject_all"}`` |
| ``retain_allowed`` | whether ``derivative_rule: retain`` is permitted (``false``) |
| ``retention_cap_ms`` | longest ``expires_at - now`` accepted, epoch ms (absent: no cap) |
| ``reconciliation_families`` | family refs consented for reconciliation (``[]``) |
| ``redaction_allowlist`` | top-level record fields that leave (absent: the default list) |
| ``language`` | the search analyzer's language, ``en`` / ``de`` / ``none`` (``en``) |
| ``version`` | incremented on every change |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from engram_core.errors import Code, EngramError
from engram_core.languages import DEFAULT_SEARCH_LANGUAGE, SEARCH_LANGUAGES
from engram_core.schemas.tools import TOOL_NAMES
from engram_core.timefmt import now_ms, parse_instant
from storage_service.store import Scope, Store

CONFIRMABLE = ("engram_memory_capture", "engram_memory_request_admission")
DEFAULT_RETENTION: dict[str, Any] = {"derivative_rule": "make-ineligible"}


def default_policy() -> dict[str, Any]:
    return {
        "enabled": False,
        "tools": [],
        "confirmation_required": [],
        "admission": {"mode": "auto_accept"},
        "retain_allowed": False,
        "reconciliation_families": [],
        "language": DEFAULT_SEARCH_LANGUAGE,
        "version": 0,
    }


def _effective(doc: dict[str, Any] | None) -> dict[str, Any]:
    return {**default_policy(), **((doc or {}).get("policy") or {})}


class Policies:
    """The policy lives in the scope's document beside its journal head (``scopes``), so the
    policy and the head a search needs are one read."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, scope: Scope) -> dict[str, Any]:
        return _effective(await self._store.scopes.find_one({"_id": scope.key}, {"policy": 1}))

    async def with_head(self, scope: Scope) -> tuple[dict[str, Any], int]:
        """The policy and the journal head cursor, from one document."""
        doc = await self._store.scopes.find_one({"_id": scope.key}, {"policy": 1, "head": 1})
        return _effective(doc), int((doc or {}).get("head", 0))

    async def update(self, scope: Scope, changes: dict[str, Any]) -> dict[str, Any]:
        """Apply ``changes`` to the scope's policy (creating it) and bump its version."""
        current = await self.get(scope)
        policy = {**current, **changes, "version": int(current["version"]) + 1}
        await self._store.scopes.update_one(
            {"_id": scope.key},
            {"$set": {"tenant": scope.tenant, "workspace": scope.workspace, "policy": policy}},
            upsert=True,
        )
        return policy

    async def enable(self, scope: Scope, tools: Iterable[str], confirmation_required: Iterable[str],
                     language: str = "") -> dict[str, Any]:
        """Turn memory on; ``language`` (empty: keep the scope's) sets the search analyzer."""
        granted = [name for name in TOOL_NAMES if name in set(tools)] or list(TOOL_NAMES)
        confirm = [name for name in CONFIRMABLE if name in set(confirmation_required)]
        unknown = (set(tools) - set(TOOL_NAMES)) | (set(confirmation_required) - set(CONFIRMABLE))
        if unknown or (language and language not in SEARCH_LANGUAGES):
            raise EngramError(Code.INVALID_SCHEMA)
        changes: dict[str, Any] = {"enabled": True, "tools": granted, "confirmation_required": confirm}
        if language:
            changes["language"] = language
        return await self.update(scope, changes)

    async def disable(self, scope: Scope) -> dict[str, Any]:
        return await self.update(scope, {"enabled": False, "tools": []})


def resolve_payload(payload: dict[str, Any], policy: dict[str, Any], now: int | None = None) -> dict[str, Any]:
    """The effective payload: retention defaulted, then checked against the scope's policy.

    ``retain`` without permission, ``expires_at`` beyond the cap, or a reconciliation family
    without consent: UNAUTHORIZED. ``expires_at`` not after now: INVALID_SCHEMA (the gateway
    checks it too; a slow call may cross the instant in between).
    """
    now = now_ms() if now is None else now
    retention = dict(payload.get("retention") or DEFAULT_RETENTION)
    if retention["derivative_rule"] == "retain" and not policy.get("retain_allowed"):
        raise EngramError(Code.UNAUTHORIZED)
    if "expires_at" in retention:
        expires = parse_instant(retention["expires_at"])
        if expires <= now:
            raise EngramError(Code.INVALID_SCHEMA)
        cap = policy.get("retention_cap_ms")
        if cap is not None and expires - now > int(cap):
            raise EngramError(Code.UNAUTHORIZED)
    families = (payload.get("reconciliation") or {}).get("family_refs") or []
    if not set(families) <= set(policy.get("reconciliation_families") or []):
        raise EngramError(Code.UNAUTHORIZED)
    return {**payload, "retention": retention}
