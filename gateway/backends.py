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
from engram_core.grpc_server import channel

T = TypeVar("T")


class Backends:
    """Channels and stubs to storage, search and admission."""

    def __init__(self, storage_addr: str, search_addr: str, admission_addr: str) -> None:
        self._channels = {
            "storage": channel(storage_addr),
            "search": channel(search_addr),
            "admission": channel(admission_addr),
        }
        self.storage = storage_pb2_grpc.StorageServiceStub(self._channels["storage"])
        self.search = search_pb2_grpc.SearchServiceStub(self._channels["search"])
        self.admission = admission_pb2_grpc.AdmissionServiceStub(self._channels["admission"])

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
        for chan in self._channels.values():
            stub = health_pb2_grpc.HealthStub(chan)
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            except grpc.aio.AioRpcError:
                return False
            if reply.status != health_pb2.HealthCheckResponse.SERVING:
                return False
        return True

    async def close(self) -> None:
        for chan in self._channels.values():
            await chan.close()


def caller_message(ctx: Any) -> common_pb2.Caller:
    """The Caller proto for a verified InvocationContext."""
    return common_pb2.Caller(
        scope=common_pb2.Scope(tenant=ctx.tenant, workspace=ctx.workspace),
        principal=ctx.principal,
        agent_id=ctx.agent_id,
        session=ctx.session,
        audit_id=ctx.audit_id,
        purpose_ref=ctx.purpose_ref,
    )
