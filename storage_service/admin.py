"""AdminService: the operator interface (SPEC §12), served by the storage process and never
reachable through MCP. Every call must carry ``authorization: Bearer <operator token>``;
anything else is refused with UNAUTHENTICATED before any work."""

from __future__ import annotations

import hmac

import grpc

from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_core.canonical import canonicalize
from engram_core.grpc_errors import rpc_boundary
from storage_service.policy import Policies
from storage_service.service import scope_of

UNAUTHENTICATED_MESSAGE = "Operator credential required."


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, policies: Policies, token: str) -> None:
        self._policies = policies
        self._expected = f"Bearer {token}".encode("utf-8")

    async def _authenticate(self, context: grpc.aio.ServicerContext) -> None:
        given = dict(context.invocation_metadata() or ()).get("authorization", "")
        if not hmac.compare_digest(str(given).encode("utf-8"), self._expected):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)

    @staticmethod
    def _state(scope: common_pb2.Scope, policy: dict[str, object]) -> admin_pb2.ScopeState:
        return admin_pb2.ScopeState(scope=scope, enabled=bool(policy["enabled"]), policy_json=canonicalize(policy))

    @rpc_boundary
    async def EnableScope(self, request: admin_pb2.EnableScopeRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        policy = await self._policies.enable(scope_of(request.scope), list(request.tools),
                                             list(request.confirmation_required), request.language)
        return self._state(request.scope, policy)

    @rpc_boundary
    async def DisableScope(self, request: admin_pb2.DisableScopeRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        return self._state(request.scope, await self._policies.disable(scope_of(request.scope)))

    @rpc_boundary
    async def GetScope(self, request: admin_pb2.GetScopeRequest, context: grpc.aio.ServicerContext) -> admin_pb2.ScopeState:
        await self._authenticate(context)
        return self._state(request.scope, await self._policies.get(scope_of(request.scope)))
