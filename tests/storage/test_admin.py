"""The AdminService: operator credential required; enable/disable/show a scope's policy."""

from __future__ import annotations

import json

import grpc
import pytest

from engram_api.admin.v1 import admin_pb2
from engram_api.storage.v1 import storage_pb2
from engram_core.access import GRANTS
from engram_core.schemas.tools import TOOL_NAMES
from tests.storage.helpers import ADMIN_TOKEN, BEARER, Storage, Who


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong-token-wrong-token"),),
                                      (("authorization", ADMIN_TOKEN),)])
async def test_calls_without_the_operator_credential_are_refused(storage: Storage, metadata: tuple) -> None:
    who = Who()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope), metadata=metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    policy = await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope))
    assert json.loads(policy.policy_json)["enabled"] is False


ADMIN_METHODS = [m.rsplit("/", 1)[1] for m in GRANTS["operator"]]


@pytest.mark.parametrize("method", ADMIN_METHODS)
async def test_a_host_context_opens_no_admin_method(storage: Storage, method: str) -> None:
    """An agent's credential — a valid host-signed invocation context with every tool — is not
    the operator's, whichever way it is sent: every AdminService method refuses it."""
    who = Who()
    context = who.caller.context_token
    request_type = getattr(admin_pb2, f"{method}Request")
    call = getattr(storage.admin, method)
    for metadata in ((("authorization", f"Bearer {context}"),), (("engram-context", context),),
                     (("authorization", context),)):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(request_type(scope=who.scope), metadata=metadata)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
    policy = await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope))
    assert json.loads(policy.policy_json)["enabled"] is False


async def test_memory_is_off_by_default_and_enable_grants_tools(storage: Storage) -> None:
    who = Who()
    shown = await storage.admin.GetScope(admin_pb2.GetScopeRequest(scope=who.scope), metadata=BEARER)
    assert shown.enabled is False and json.loads(shown.policy_json)["tools"] == []
    enabled = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope), metadata=BEARER)
    assert enabled.enabled and json.loads(enabled.policy_json)["tools"] == list(TOOL_NAMES)
    some = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(
        scope=who.scope, tools=["engram_memory_search", "engram_memory_get"],
        confirmation_required=["engram_memory_capture"]), metadata=BEARER)
    policy = json.loads(some.policy_json)
    assert policy["tools"] == ["engram_memory_search", "engram_memory_get"]
    assert policy["confirmation_required"] == ["engram_memory_capture"]
    disabled = await storage.admin.DisableScope(admin_pb2.DisableScopeRequest(scope=who.scope), metadata=BEARER)
    assert disabled.enabled is False and json.loads(disabled.policy_json)["version"] == 3


async def test_unknown_tool_names_are_refused(storage: Storage) -> None:
    request = admin_pb2.EnableScopeRequest(scope=Who().scope, tools=["engram_memory_admin"])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await storage.admin.EnableScope(request, metadata=BEARER)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_empty_scope_is_refused(storage: Storage) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(), metadata=BEARER)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_search_language_defaults_to_en_is_set_kept_and_checked(storage: Storage) -> None:
    who = Who()
    enabled = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope), metadata=BEARER)
    assert json.loads(enabled.policy_json)["language"] == "en"
    for language in ("de", "none", "en"):
        set_ = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope, language=language),
                                               metadata=BEARER)
        assert json.loads(set_.policy_json)["language"] == language
    await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope, language="de"), metadata=BEARER)
    kept = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope), metadata=BEARER)
    assert json.loads(kept.policy_json)["language"] == "de"  # empty: keep the current one
    for bad in ("fr", "EN", "de "):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope, language=bad), metadata=BEARER)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    policy = await storage.stub.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=who.scope))
    assert json.loads(policy.policy_json)["language"] == "de"
