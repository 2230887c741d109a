"""Builders for the storage tests: callers, gate keys and the RPCs as the gateway sends them —
each Caller with a context signed by the test host (and, for withdraw and forget, a fresh
confirmation), as storage verifies them itself."""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from admission_worker.tasks import TaskClients, run_decision
from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.digests import operation_digest
from engram_core.errors import EngramError
from engram_core.grpc_errors import error_from_rpc
from engram_core.hosts import HostRegistry, upsert_host
from engram_core.schemas.tools import TOOL_NAMES
from engram_core.transport import Transport
from engram_hostkit.examples import make_capture_args
from engram_hostkit.keys import generate_host_keys
from engram_hostkit.tokens import mint_confirmation, mint_context
from storage_service.deps import Deps
from storage_service.settings import StorageSettings
from storage_service.store import Scope

ADMIN_TOKEN = "test-operator-token-0123456789"
# The operator's credential as the AdminService wants it.
BEARER = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
PURPOSE = "purpose:test"
# The host every storage test acts for: its registry file lists each tenant a Who uses.
HOST_ID = "storage-test-host"
AUDIENCE = "storage-test"
HOST_PRIVATE, HOST_PUBLIC = generate_host_keys()
HOST_REGISTRY = Path(tempfile.mkdtemp(prefix="engram-test-hosts-")) / "hosts.json"
_ALLOWED: set[str] = set()


def allow_tenant(tenant: str) -> None:
    """Let the test host act for ``tenant`` (storage reloads the registry file on change)."""
    if tenant not in _ALLOWED:
        _ALLOWED.add(tenant)
        upsert_host(str(HOST_REGISTRY), HOST_ID, HOST_PUBLIC, sorted(_ALLOWED))


allow_tenant("t-bootstrap")


def host_registry() -> HostRegistry:
    """The registry a test storage service reads, re-read on every call that finds it changed."""
    return HostRegistry.load(str(HOST_REGISTRY), reload_interval=0.0)


@dataclass
class Storage:
    stub: storage_pb2_grpc.StorageServiceStub
    admin: admin_pb2_grpc.AdminServiceStub
    deps: Deps
    addr: str
    settings: StorageSettings


@dataclass
class Who:
    """One caller: a fresh scope (unique tenant) unless given."""

    tenant: str = field(default_factory=lambda: "t-" + uuid.uuid4().hex[:10])
    workspace: str = "default"
    principal: str = "user:ada"

    def __post_init__(self) -> None:
        allow_tenant(self.tenant)

    @property
    def scope(self) -> common_pb2.Scope:
        return common_pb2.Scope(tenant=self.tenant, workspace=self.workspace)

    @property
    def caller(self) -> common_pb2.Caller:
        """The caller of one call: a fresh host-signed context (every tool granted)."""
        return self.caller_with()

    def caller_with(self, confirmation: str = "", **context: Any) -> common_pb2.Caller:
        claims = {"agent_id": "agent:t", "session": "s", "audit_id": "audit-1", "purpose_ref": PURPOSE,
                  "tools": TOOL_NAMES, **context}
        token = mint_context(HOST_PRIVATE, host_id=HOST_ID, audience=AUDIENCE, tenant=self.tenant,
                             workspace=self.workspace, principal=self.principal, **claims)
        return common_pb2.Caller(scope=self.scope, principal=self.principal, agent_id=claims["agent_id"],
                                 session=claims["session"], audit_id=claims["audit_id"],
                                 purpose_ref=claims["purpose_ref"], context_token=token,
                                 confirmation_token=confirmation)

    def confirmation(self, tool: str, target: str, arguments: dict[str, Any]) -> str:
        return mint_confirmation(HOST_PRIVATE, host_id=HOST_ID, audience=AUDIENCE, tenant=self.tenant,
                                 workspace=self.workspace, principal=self.principal, tool=tool, target=target,
                                 arguments=arguments, approver="human:test")

    def other_principal(self, principal: str) -> "Who":
        return Who(self.tenant, self.workspace, principal)


def key(prefix: str = "key") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


async def rpc_code(call: Any) -> str:
    """The contract code an RPC (or an in-process call) failed with; AssertionError when it
    succeeded."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return error_from_rpc(exc).code.value
    except EngramError as exc:
        return exc.code.value
    raise AssertionError("the call succeeded")


async def enable(storage: Storage, who: Who, **policy: Any) -> int:
    """Memory on for ``who``'s scope with ``policy``'s members; returns the journal cursor of the
    last policy change (each is a journal event: a test's own events start after it)."""
    state = await storage.admin.EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope),
                                            metadata=BEARER)
    if not policy:
        return state.change_cursor
    return (await storage.deps.policies.update(Scope(who.tenant, who.workspace), policy)).cursor


def capture_request(who: Who, args: dict[str, Any], caller: common_pb2.Caller | None = None) -> storage_pb2.CaptureRequest:
    return storage_pb2.CaptureRequest(
        caller=caller or who.caller, idempotency_key=args["idempotency_key"],
        operation_digest=operation_digest("engram_memory_capture", args),
        payload_json=canonicalize(args["payload"]), evidence_json=canonicalize(args["evidence"]),
    )


async def capture(storage: Storage, who: Who, text: str = "A decision worth keeping.",
                  caller: common_pb2.Caller | None = None, **kw: Any) -> dict[str, Any]:
    args = make_capture_args(idempotency_key=kw.pop("idempotency_key", None) or key("cap"), text=text,
                             purpose_ref=PURPOSE, **kw)
    reply = await storage.stub.Capture(capture_request(who, args, caller))
    return json.loads(reply.value_json)


def transition_request(who: Who, tool: str, target: str, idem: str | None = None,
                       reason: str = "reason:test") -> storage_pb2.TransitionRequest:
    """A withdraw or forget as the gateway forwards it, with a fresh host confirmation (single
    use: a retry needs a new request, as an agent's retry needs a new confirmation)."""
    field_name = "candidate_id" if tool == "engram_memory_withdraw" else "record_id"
    idem = idem or key("tr")
    args = {field_name: target, "idempotency_key": idem, "reason_ref": reason}
    return storage_pb2.TransitionRequest(
        caller=who.caller_with(who.confirmation(tool, target, args)), idempotency_key=idem,
        operation_digest=operation_digest(tool, args), target=target, reason_ref=reason,
    )


def begin_request(who: Who, candidate_id: str, idem: str | None = None) -> storage_pb2.BeginAdmissionRequest:
    idem = idem or key("adm")
    args = {"candidate_id": candidate_id, "idempotency_key": idem}
    return storage_pb2.BeginAdmissionRequest(
        caller=who.caller, candidate_id=candidate_id, idempotency_key=idem,
        operation_digest=operation_digest("engram_memory_request_admission", args),
    )


async def admit(storage: Storage, who: Who, candidate_id: str) -> dict[str, Any]:
    """Begin admission and run the worker's decision (real gRPC, no Celery); the outcome."""
    begun = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    if begun.outcome_json:
        return json.loads(begun.outcome_json)
    clients = TaskClients.connect(Transport.plaintext(), storage.addr, "127.0.0.1:1", timeout=10)
    await asyncio.to_thread(run_decision, clients, begun.request_id)
    decided = await storage.stub.BeginAdmission(begin_request(who, candidate_id))
    return json.loads(decided.outcome_json)


async def accepted_record(storage: Storage, who: Who, text: str) -> tuple[str, str]:
    """Capture and admit ``text``; (candidate id, record id) of the accepted record."""
    candidate_id = (await capture(storage, who, text))["candidate_id"]
    outcome = await admit(storage, who, candidate_id)
    assert outcome["status"] == "accepted", outcome
    return candidate_id, outcome["record_id"]


@asynccontextmanager
async def serving_search(servicer: Any) -> AsyncIterator[Any]:
    """``servicer`` (a SearchServicer) on a real gRPC server on loopback; yields its stub."""
    async with search_server(servicer) as (stub, _):
        yield stub


@asynccontextmanager
async def search_server(servicer: Any) -> AsyncIterator[tuple[Any, str]]:
    """``servicer`` (a SearchServicer) on a real gRPC server on loopback; yields its stub and
    its address (for the worker's replica list)."""
    from engram_api.search.v1 import search_pb2_grpc
    from engram_core.grpc_server import create_server
    from search_service.settings import SearchSettings

    running = await create_server(SearchSettings(cursor_key="k" * 32, grpc_port=0),
                                  lambda server: search_pb2_grpc.add_SearchServiceServicer_to_server(servicer, server),
                                  Transport.plaintext())
    addr = f"127.0.0.1:{running.port}"
    try:
        async with Transport.plaintext().channel(addr, "search") as channel:
            yield search_pb2_grpc.SearchServiceStub(channel), addr
    finally:
        await running.server.stop(0)
