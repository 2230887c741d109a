"""gRPC clients of the downstream services, with the deadline and error mapping in one place."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_api.admission.v1 import admission_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2_grpc
from engram_api.storage.v1 import storage_pb2_grpc
from engram_core.dependency import Dependency, observe_rpc
from engram_core.errors import Code, EngramError
from engram_core.grpc_errors import error_from_rpc
from engram_core.transport import ReloadingStub, Transport

log = logging.getLogger("engram.gateway")


STORAGE, SEARCH, ADMISSION = "storage", "search", "admission"
SERVING, NOT_SERVING, UNAVAILABLE = "serving", "not_serving", "unavailable"


class Backends:
    """Channels and stubs to storage, search and admission, and each one's reachability as
    this gateway's calls see it (logged when one goes away and when it is back)."""

    def __init__(self, transport: Transport, storage_addr: str, search_addr: str, admission_addr: str) -> None:
        self.storage = transport.stub(storage_pb2_grpc.StorageServiceStub, storage_addr, STORAGE)
        self.search = transport.stub(search_pb2_grpc.SearchServiceStub, search_addr, SEARCH)
        self.admission = transport.stub(admission_pb2_grpc.AdmissionServiceStub, admission_addr, ADMISSION)
        self.dependencies = {name: Dependency(name, log) for name in (STORAGE, SEARCH, ADMISSION)}

    async def call(self, backend: str, method: str, request: Any, timeout: float) -> Any:
        """One unary call of ``backend``'s ``method``; failures come back as the contract's
        EngramError."""
        if timeout <= 0:
            raise EngramError(Code.DEADLINE_EXCEEDED)
        dependency = self.dependencies[backend]
        try:
            reply = await getattr(self._stubs()[backend], method)(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            observe_rpc(dependency, exc)
            raise error_from_rpc(exc) from None
        dependency.ok()
        return reply

    async def health(self, timeout: float = 1.0) -> dict[str, str]:
        """Each backend's grpc.health.v1 answer: serving, not_serving or unavailable."""
        async def one(stub: ReloadingStub[Any]) -> str:
            try:
                reply = await health_pb2_grpc.HealthStub(stub.channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=timeout)
            except grpc.aio.AioRpcError:
                return UNAVAILABLE
            return SERVING if reply.status == health_pb2.HealthCheckResponse.SERVING else NOT_SERVING

        stubs = self._stubs()
        answers = await asyncio.gather(*(one(stub) for stub in stubs.values()))
        return dict(zip(stubs, answers))

    async def close(self) -> None:
        for backend in self._stubs().values():
            await backend.channel.close()

    def _stubs(self) -> dict[str, ReloadingStub[Any]]:
        return {STORAGE: self.storage, SEARCH: self.search, ADMISSION: self.admission}


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
