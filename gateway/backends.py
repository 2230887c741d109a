"""gRPC clients of the downstream services, with the deadline and error mapping in one place."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_api.admission.v1 import admission_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import error_from_rpc
from engram_core.transport import ReloadingStub, Transport

T = TypeVar("T")


class Backends:
    """Channels and stubs to storage, search and admission."""

    def __init__(self, transport: Transport, storage_addr: str, search_addr: str, admission_addr: str) -> None:
        self.storage = transport.stub(storage_pb2_grpc.StorageServiceStub, storage_addr, "storage")
        self.search = transport.stub(search_pb2_grpc.SearchServiceStub, search_addr, "search")
        self.admission = transport.stub(admission_pb2_grpc.AdmissionServiceStub, admission_addr, "admission")

    async def call(self, method: Callable[..., Awaitable[T]], request: Any, timeout: float) -> T:
        """One unary call; failures come back as the contract's EngramError."""
        if timeout <= 0:
            raise EngramError(Code.DEADLINE_EXCEEDED)
        try:
            return await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    async def all_serving(self, timeout: float = 1.0) -> bool:
        """True when every downstream health service reports SERVING."""
        for backend in self._stubs():
            stub = health_pb2_grpc.HealthStub(backend.channel)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            except grpc.aio.AioRpcError:
                return False
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                return False
        return True

    async def close(self) -> None:
        for backend in self._stubs():
            await backend.channel.close()

    def _stubs(self) -> tuple[ReloadingStub[Any], ...]:
        return (self.storage, self.search, self.admission)


def caller_message(ctx: Any, confirmation_token: str = "") -> common_pb2.Caller:
    """The Caller proto for a verified InvocationContext, with the host's tokens as received
    (storage verifies them again before it acts)."""
    return common_pb2.Caller(
        scope=common_pb2.Scope(tenant=ctx.tenant, workspace=ctx.workspace),
        principal=ctx.principal,
        agent_id=ctx.agent_id,
        session=ctx.session,
        audit_id=ctx.audit_id,
        purpose_ref=ctx.purpose_ref,
        context_token=ctx.token,
        confirmation_token=confirmation_token,
    )
