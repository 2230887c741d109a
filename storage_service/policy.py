"""The scope's operator policy in storage: read with the journal head, changed only by an
operator, each change a journal event (SPEC §12). The model and its members are
:class:`engram_core.policy.ScopePolicy`; here are its storage and the capture-time rules it drives.

A change is compare-and-set on ``version``: an edit based on version *n* applies only while the
stored policy is still *n* (else POLICY_STALE, nothing changes), so two operators' concurrent
edits cannot lose one another. An edit without an expected version is applied to whatever is
current inside the transaction that writes it (a patch of the members it names), so it loses
nothing either. The change and its ``policy_change`` event (actor, members changed, the new
policy's digest; object id ``policy``, states the versions) commit together in the scope's
journal group, and every service reads the policy on its next call: no restart (the gateway's
copy is keyed by the scope's change token, which the group's commit replaces:
:mod:`engram_core.scope_changes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engram_core.digests import digest
from engram_core.errors import Code, EngramError
from engram_core.languages import SEARCH_LANGUAGES
from engram_core.policy import CONFIRMABLE, POLICY_CHANGE, ScopePolicy, changed_members
from engram_core.schemas.tools import TOOL_NAMES
from engram_core.timefmt import now_ms, parse_instant
from storage_service.commits import GroupCommitter, JournalTxn
from storage_service.store import Scope, Store

DEFAULT_RETENTION: dict[str, Any] = {"derivative_rule": "make-ineligible"}
POLICY_OBJECT_ID = "policy"


def default_policy() -> ScopePolicy:
    return ScopePolicy()


@dataclass(frozen=True)
class PolicyChange:
    policy: ScopePolicy
    members: list[str]
    cursor: int  # the journal cursor of the change (0: nothing changed, no event)


class Policies:
    """The policy lives in the scope's document beside its journal head (``scopes``), so the
    policy and the head a search needs are one read."""

    def __init__(self, store: Store, commits: GroupCommitter) -> None:
        self._store = store
        self._commits = commits

    async def get(self, scope: Scope) -> ScopePolicy:
        doc = await self._store.scopes.find_one({"_id": scope.key}, {"policy": 1})
        return ScopePolicy.from_stored((doc or {}).get("policy"))

    async def read_in(self, txn: JournalTxn) -> ScopePolicy:
        """The policy as ``txn`` sees it (a change racing it conflicts with the transaction)."""
        doc = await self._store.scopes.find_one({"_id": txn.scope.key}, {"policy": 1}, session=txn.session)
        return ScopePolicy.from_stored((doc or {}).get("policy"))

    async def with_head(self, scope: Scope) -> tuple[ScopePolicy, int]:
        """The policy and the journal head cursor, from one document."""
        doc = await self._store.scopes.find_one({"_id": scope.key}, {"policy": 1, "head": 1})
        return ScopePolicy.from_stored((doc or {}).get("policy")), int((doc or {}).get("head", 0))

    async def update(self, scope: Scope, changes: dict[str, Any], *, expected_version: int | None = None,
                     actor: str = "operator") -> PolicyChange:
        """Apply ``changes`` (top-level members) to the scope's policy as one journaled change.
        ``expected_version``: the version the edit was based on (POLICY_STALE when it moved on).
        A change that changes nothing appends no event and keeps the version."""
        store = self._store

        async def body(txn: JournalTxn) -> PolicyChange:
            current = await self.read_in(txn)
            if expected_version is not None and current.version != expected_version:
                raise EngramError(Code.POLICY_STALE)
            policy = current.changed(changes)
            members = changed_members(current, policy)
            if not members:
                return PolicyChange(current, [], 0)
            await store.scopes.update_one(
                {"_id": scope.key},
                {"$set": {"tenant": scope.tenant, "workspace": scope.workspace, "policy": policy.wire()}},
                upsert=True, session=txn.session,
            )
            event = txn.append(POLICY_CHANGE, POLICY_OBJECT_ID, str(current.version), str(policy.version), {
                "actor": actor, "members": members, "policy_digest": digest("policy", policy.wire())})
            return PolicyChange(policy, members, event.cursor)

        return await self._commits.run(scope, body)

    async def enable(self, scope: Scope, tools: Iterable[str], confirmation_required: Iterable[str],
                     language: str = "", *, expected_version: int | None = None,
                     actor: str = "operator") -> PolicyChange:
        """Turn memory on; ``tools`` empty grants all six; ``language`` (empty: keep the
        scope's) sets the search analyzer."""
        tools, confirm = list(tools), list(confirmation_required)
        unknown = (set(tools) - set(TOOL_NAMES)) | (set(confirm) - set(CONFIRMABLE))
        if unknown or (language and language not in SEARCH_LANGUAGES):
            raise EngramError(Code.INVALID_SCHEMA)
        changes: dict[str, Any] = {
            "enabled": True,
            "tools": [name for name in TOOL_NAMES if name in set(tools)] or list(TOOL_NAMES),
            "confirmation_required": [name for name in CONFIRMABLE if name in set(confirm)],
        }
        if language:
            changes["language"] = language
        return await self.update(scope, changes, expected_version=expected_version, actor=actor)

    async def disable(self, scope: Scope, *, expected_version: int | None = None,
                      actor: str = "operator") -> PolicyChange:
        return await self.update(scope, {"enabled": False, "tools": []}, expected_version=expected_version,
                                 actor=actor)


def resolve_payload(payload: dict[str, Any], policy: ScopePolicy, now: int | None = None) -> dict[str, Any]:
    """The effective payload: retention defaulted, then checked against the scope's policy.

    ``retain`` without permission, ``expires_at`` beyond the cap, or a reconciliation family
    without consent: UNAUTHORIZED. ``expires_at`` not after now: INVALID_SCHEMA (the gateway
    checks it too; a slow call may cross the instant in between).
    """
    now = now_ms() if now is None else now
    retention = dict(payload.get("retention") or DEFAULT_RETENTION)
    if retention["derivative_rule"] == "retain" and not policy.retain_allowed:
        raise EngramError(Code.UNAUTHORIZED)
    if "expires_at" in retention:
        expires = parse_instant(retention["expires_at"])
        if expires <= now:
            raise EngramError(Code.INVALID_SCHEMA)
        cap = policy.retention_cap_ms
        if cap is not None and expires - now > cap:
            raise EngramError(Code.UNAUTHORIZED)
    families = (payload.get("reconciliation") or {}).get("family_refs") or []
    if not set(families) <= set(policy.reconciliation_families):
        raise EngramError(Code.UNAUTHORIZED)
    return {**payload, "retention": retention}
