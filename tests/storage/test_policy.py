"""The typed scope policy through the AdminService (SPEC §12): every member validated on write
(both sides of each bound), compare-and-set on the version, one journal event per change, and
the grants per principal and agent enforced by storage on the next call."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_api.admin.v1 import admin_pb2
from engram_core.digests import digest
from engram_core.jws import b64url_encode, public_key_to_b64url
from engram_core.policy import MAX_LIST, MAX_RETENTION_CAP_MS, ScopePolicy
from engram_core.schemas.tools import TOOL_NAMES
from storage_service import journal
from storage_service.store import Scope
from tests.storage.helpers import BEARER, Storage, Who, capture, enable, rpc_code

SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"


def update(storage: Storage, who: Who, changes: Any, **edit: Any) -> Any:
    return storage.admin.UpdatePolicy(admin_pb2.UpdatePolicyRequest(
        scope=who.scope, changes_json=json.dumps(changes).encode(), **edit), metadata=BEARER)


def attester_key() -> str:
    return public_key_to_b64url(Ed25519PrivateKey.generate().public_key())


async def test_a_change_is_one_journal_event_with_actor_members_and_digest(storage: Storage) -> None:
    who = Who()
    assert await enable(storage, who) == 1
    state = await update(storage, who, {"retain_allowed": True, "language": "de"}, actor_ref="ticket:OPS-7")
    assert (state.version, state.change_cursor, list(state.changed_members)) == (2, 2, ["language", "retain_allowed"])
    policy = json.loads(state.policy_json)
    assert policy["retain_allowed"] is True and policy["language"] == "de" and policy["version"] == 2
    event = await storage.deps.store.journal.find_one({"scope": Scope(who.tenant, who.workspace).key, "cursor": 2})
    assert (event["operation"], event["object_id"], event["from_state"], event["to_state"]) == (
        "policy_change", "policy", "1", "2")
    assert event["binding"] == {"actor": "ticket:OPS-7", "members": ["language", "retain_allowed"],
                                "policy_digest": digest("policy", policy)}
    # The next read sees it: no restart, no cache.
    shown = await storage.admin.GetScope(admin_pb2.GetScopeRequest(scope=who.scope), metadata=BEARER)
    assert json.loads(shown.policy_json) == policy and shown.change_cursor == 0
    # Setting what is already set changes nothing and appends nothing.
    again = await update(storage, who, {"retain_allowed": True})
    assert (again.version, again.change_cursor, list(again.changed_members)) == (2, 0, [])
    assert await journal.head_cursor(storage.deps.store, Scope(who.tenant, who.workspace)) == 2
    assert await journal.verify_chain(storage.deps.store, Scope(who.tenant, who.workspace))


async def test_enable_and_disable_are_journaled_changes_too(storage: Storage) -> None:
    who = Who()
    on = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope, tools=[SEARCH]),
                                         metadata=BEARER)
    assert (on.version, on.change_cursor, list(on.changed_members)) == (1, 1, ["enabled", "tools"])
    off = await storage.admin.DisableScope(admin_pb2.DisableScopeRequest(scope=who.scope), metadata=BEARER)
    assert (off.enabled, off.version, off.change_cursor) == (False, 2, 2)
    ops = [e["operation"] async for e in storage.deps.store.journal.find({"scope": Scope(who.tenant, who.workspace).key})]
    assert ops == ["policy_change", "policy_change"]


VALID: list[tuple[str, Any]] = [
    ("enabled", True),
    ("tools", [SEARCH, GET]),
    ("tools", []),
    ("grants", [{"subject": "agent", "id": "agent:a1", "tools": [SEARCH]},
                {"subject": "principal", "id": "user:ada", "tools": []}]),
    ("grants", [{"subject": "agent", "id": f"agent:{i}", "tools": [SEARCH]} for i in range(MAX_LIST)]),
    ("confirmation_required", [CAPTURE, "engram_memory_request_admission"]),
    ("retention_cap_ms", 1),
    ("retention_cap_ms", MAX_RETENTION_CAP_MS),
    ("retention_cap_ms", None),
    ("retain_allowed", True),
    ("reconciliation_families", ["family:a", "family:b"]),
    ("reconciliation_families", [f"family:{i}" for i in range(MAX_LIST)]),
    ("redaction_allowlist", ["record_id", "components"]),
    ("redaction_allowlist", None),
    ("admission", {"mode": "require_adjudication"}),
    ("admission", {"mode": "auto_accept", "require_trust": "signed", "below_trust": "adjudicate",
                   "adjudicate_types": ["event:deploy"]}),
    ("attester_keys", [{"key_id": "attester:1", "public_key": attester_key(), "trust": "signed"}]),
    ("attester_keys", [{"key_id": "verifier:1", "public_key": attester_key(), "trust": "earned"}]),
    ("language", "none"),
]

INVALID: list[tuple[str, Any]] = [
    ("enabled", "true"),                       # no coercion
    ("enabled", 1),
    ("tools", ["engram_memory_admin"]),        # not one of the six
    ("tools", [SEARCH, SEARCH]),               # duplicate
    ("tools", SEARCH),                         # not a list
    ("grants", [{"subject": "team", "id": "t", "tools": []}]),
    ("grants", [{"subject": "agent", "id": "", "tools": []}]),
    ("grants", [{"subject": "agent", "id": "a", "tools": [], "extra": 1}]),
    ("grants", [{"subject": "agent", "id": "a", "tools": []}, {"subject": "agent", "id": "a", "tools": [GET]}]),
    ("grants", [{"subject": "agent", "id": f"agent:{i}", "tools": [SEARCH]} for i in range(MAX_LIST + 1)]),
    ("confirmation_required", [SEARCH]),      # only capture / request_admission can require one
    ("retention_cap_ms", 0),
    ("retention_cap_ms", MAX_RETENTION_CAP_MS + 1),
    ("retention_cap_ms", 1.5),
    ("retain_allowed", None),
    ("reconciliation_families", ["x" * 513]),  # an opaque ref is at most 512 bytes
    ("reconciliation_families", [f"family:{i}" for i in range(MAX_LIST + 1)]),
    ("redaction_allowlist", ["password"]),
    ("admission", {"mode": "yolo"}),
    ("admission", {"require_trust": "divine"}),
    ("admission", {"below_trust": "ignore"}),
    ("attester_keys", [{"key_id": "k", "public_key": b64url_encode(b"\x01" * 31)}]),  # not 32 bytes
    ("attester_keys", [{"key_id": "k", "public_key": "not base64url!"}]),
    ("attester_keys", [{"key_id": "k", "public_key": attester_key(), "trust": "asserted"}]),  # not a class a key gives
    ("attester_keys", [{"key_id": "k", "public_key": attester_key()}, {"key_id": "k", "public_key": attester_key()}]),
    ("language", "fr"),
    ("version", 99),                           # storage owns the version
    ("head", 1),                               # not a member
]


@pytest.mark.parametrize(("member", "value"), VALID, ids=[f"{m}-{i}" for i, (m, _) in enumerate(VALID)])
async def test_every_member_accepts_its_valid_values(storage: Storage, member: str, value: Any) -> None:
    who = Who()
    default = ScopePolicy().wire()[member]
    state = await update(storage, who, {member: value})
    stored = json.loads(state.policy_json)
    assert stored[member] == ({**default, **value} if isinstance(value, dict) else value)
    assert state.version == (0 if stored[member] == default else 1)  # setting the default changes nothing
    assert (await storage.deps.policies.get(Scope(who.tenant, who.workspace))).wire() == stored


@pytest.mark.parametrize(("member", "value"), INVALID, ids=[f"{m}-{i}" for i, (m, _) in enumerate(INVALID)])
async def test_an_invalid_member_is_refused_and_nothing_changes(storage: Storage, member: str, value: Any) -> None:
    who = Who()
    await enable(storage, who)
    assert await rpc_code(update(storage, who, {"retain_allowed": True, member: value})) == "INVALID_SCHEMA"
    policy = await storage.deps.policies.get(Scope(who.tenant, who.workspace))
    assert policy.version == 1 and policy.retain_allowed is False  # no partial application


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"enabled"', b"\xff"])
async def test_changes_that_are_not_a_json_object_are_refused(storage: Storage, body: bytes) -> None:
    request = admin_pb2.UpdatePolicyRequest(scope=Who().scope, changes_json=body)
    assert await rpc_code(storage.admin.UpdatePolicy(request, metadata=BEARER)) == "INVALID_SCHEMA"


async def test_an_edit_based_on_an_old_version_is_stale(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    assert (await update(storage, who, {"retain_allowed": True}, expected_version=1)).version == 2
    assert await rpc_code(update(storage, who, {"language": "de"}, expected_version=1)) == "POLICY_STALE"
    assert await rpc_code(storage.admin.DisableScope(admin_pb2.DisableScopeRequest(
        scope=who.scope, expected_version=1), metadata=BEARER)) == "POLICY_STALE"
    policy = await storage.deps.policies.get(Scope(who.tenant, who.workspace))
    assert (policy.version, policy.language, policy.enabled) == (2, "en", True)


async def test_concurrent_edits_cannot_lose_one_another(storage: Storage) -> None:
    """Two operators editing from the same version: exactly one applies, the other is told it
    is stale. Unversioned patches of different members racing: both are kept."""
    who = Who()
    await enable(storage, who)
    results = await asyncio.gather(update(storage, who, {"retain_allowed": True}, expected_version=1),
                                   update(storage, who, {"language": "de"}, expected_version=1),
                                   return_exceptions=True)
    codes = sorted(["ok" if isinstance(r, admin_pb2.ScopeState) else await rpc_code(_raise(r)) for r in results])
    assert codes == ["POLICY_STALE", "ok"]
    patches = [{"reconciliation_families": ["family:a"]}, {"retention_cap_ms": 86_400_000},
               {"redaction_allowlist": ["record_id", "components"]}, {"admission": {"mode": "require_adjudication"}}]
    states = await asyncio.gather(*(update(storage, who, p) for p in patches))
    assert sorted(s.version for s in states) == [3, 4, 5, 6]
    policy = await storage.deps.policies.get(Scope(who.tenant, who.workspace))
    assert policy.version == 6
    assert policy.reconciliation_families == ("family:a",) and policy.retention_cap_ms == 86_400_000
    assert policy.redaction_allowlist == ("record_id", "components") and policy.admission.mode == "require_adjudication"
    events = await storage.deps.store.journal.count_documents({"scope": Scope(who.tenant, who.workspace).key,
                                                               "operation": "policy_change"})
    assert events == 6 - 1 + 1  # the enable, the one versioned edit that applied, four patches


async def _raise(exc: BaseException) -> None:
    raise exc


async def test_grants_per_principal_and_agent_are_enforced_by_storage(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    await update(storage, who, {"grants": [
        {"subject": "principal", "id": "user:ada", "tools": [SEARCH, GET]},
        {"subject": "agent", "id": "agent:scribe", "tools": list(TOOL_NAMES)},
    ]})
    # Ada's agents get her grant (no capture) ...
    assert await rpc_code(capture(storage, who)) == "UNAUTHORIZED"
    # ... except the one agent granted more: its grant wins over its principal's.
    scribe = who.caller_with(agent_id="agent:scribe")
    assert (await capture(storage, who, caller=scribe))["status"] == "committed_pending"
    # Another principal has the scope's tools.
    assert (await capture(storage, who.other_principal("user:bob")))["status"] == "committed_pending"
    # Withdrawing the grant takes effect on the next call.
    await update(storage, who, {"grants": []})
    assert (await capture(storage, who))["status"] == "committed_pending"
    await storage.admin.DisableScope(admin_pb2.DisableScopeRequest(scope=who.scope), metadata=BEARER)
    assert await rpc_code(capture(storage, who, caller=scribe)) == "UNAUTHORIZED"


def test_the_model_reads_absent_members_as_their_defaults_and_fails_closed_on_a_bad_document() -> None:
    assert ScopePolicy.from_stored(None) == ScopePolicy() and ScopePolicy().tools_for("u", "a") == frozenset()
    assert ScopePolicy.from_stored({"enabled": True, "tools": [SEARCH]}).tools_for("u", "a") == {SEARCH}
    with pytest.raises(Exception) as bad:
        ScopePolicy.from_stored({"enabled": "yes"})
    assert getattr(bad.value, "code").value == "POLICY_UNAVAILABLE"
