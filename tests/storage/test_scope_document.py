"""A scope's policy and journal head live in one document: GetScopePolicy with the head is one
read, a policy change is itself a journal event in the same document, and
a database whose policies are still in the legacy ``policies`` collection is migrated at start
(a newer policy already in the scope document wins)."""

from __future__ import annotations

import json

from engram_api.storage.v1 import storage_pb2
from engram_core.policy import ScopePolicy
from storage_service.store import Scope
from tests.storage.helpers import Storage, Who, accepted_record, enable


async def test_policy_and_head_are_one_document(storage: Storage) -> None:
    who = Who()
    scope = Scope(who.tenant, who.workspace)
    await enable(storage, who, language="de")  # the document exists before any event
    doc = await storage.deps.store.scopes.find_one({"_id": scope.key})
    assert doc is not None and doc["policy"]["language"] == "de" and doc["head"] == 2  # two policy changes
    await accepted_record(storage, who, "Der Pegel steht bei drei Metern.")
    doc = await storage.deps.store.scopes.find_one({"_id": scope.key})
    assert doc["policy"]["language"] == "de" and doc["head"] == 4  # and capture, admission
    reply = await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope,
                                                                                with_head_cursor=True))
    assert int(reply.head_cursor) == doc["head"] and json.loads(reply.policy_json)["language"] == "de"
    assert await storage.deps.store.legacy_policies.count_documents({"_id": scope.key}) == 0
    verified = await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope))
    assert verified.head_cursor == "" and json.loads(verified.policy_json)["enabled"] is True


async def test_an_unknown_scope_has_the_default_policy_and_head_zero(storage: Storage) -> None:
    who = Who()
    reply = await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope,
                                                                                with_head_cursor=True))
    assert reply.head_cursor == "0" and json.loads(reply.policy_json)["enabled"] is False


async def test_legacy_policies_move_into_the_scope_document(storage: Storage) -> None:
    store = storage.deps.store
    moved, kept = Who(), Who()
    moved_scope, kept_scope = Scope(moved.tenant, moved.workspace), Scope(kept.tenant, kept.workspace)
    legacy = {"enabled": True, "tools": ["engram_memory_search"], "language": "none", "version": 3}
    await store.legacy_policies.insert_one({"_id": moved_scope.key, "tenant": moved.tenant,
                                            "workspace": moved.workspace, "policy": legacy})
    await enable(storage, kept, language="de")  # already in the new place: newer than a legacy copy
    await store.legacy_policies.insert_one({"_id": kept_scope.key, "policy": {**legacy, "version": 1}})
    await store.ensure_indexes()
    await store.ensure_indexes()  # idempotent
    assert await storage.deps.policies.get(moved_scope) == ScopePolicy.from_stored(legacy)
    assert (await storage.deps.policies.get(kept_scope)).language == "de"
    assert await store.legacy_policies.count_documents({}) == 0
    doc = await store.scopes.find_one({"_id": moved_scope.key})
    assert (doc["tenant"], doc["workspace"]) == (moved.tenant, moved.workspace)
