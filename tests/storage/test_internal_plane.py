"""The storage service on the mutual-TLS plane, called over real gRPC by each service identity:
each may call only its own methods; every other caller is refused before anything changes
(journal length, record state), and the AdminService wants the operator identity and the
bearer token. Storage also re-checks the host's own tokens: the gateway's certificate without
a host-signed confirmation for exactly this operation forgets nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from admission_worker.tasks import TaskClients, run_decision
from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_core.access import DENIED_MESSAGE
from engram_core.pki import create_dev_pki
from engram_core.transport import Transport
from storage_service.deps import Deps
from storage_service.server import create
from storage_service.settings import StorageSettings
from storage_service.store import Scope
from engram_core.digests import operation_digest
from engram_hostkit.examples import make_capture_args
from engram_hostkit.keys import generate_host_keys
from engram_hostkit.tokens import mint_context
from tests.storage.helpers import (ADMIN_TOKEN, AUDIENCE, BEARER, HOST_ID, HOST_REGISTRY, Who, begin_request,
                                   capture_request, host_registry, key, rpc_code, transition_request)

FORGET = "engram_memory_forget"



@dataclass
class Plane:
    addr: str
    pki: Path
    deps: Deps

    def stub(self, identity: str) -> storage_pb2_grpc.StorageServiceStub:
        return storage_pb2_grpc.StorageServiceStub(Transport(self.pki / identity).channel(self.addr, "storage"))

    def admin(self, identity: str) -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(Transport(self.pki / identity).channel(self.addr, "storage"))


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def plane(mongo_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Plane]:
    tmp = tmp_path_factory.mktemp("plane")
    create_dev_pki(tmp / "pki")
    tag = uuid.uuid4().hex[:8]
    settings = StorageSettings(
        grpc_host="127.0.0.1", grpc_port=0, mongo_url=mongo_url, mongo_db=f"plane_{tag}", redis_url=redis_url,
        deployment=f"plane-{tag}", keyring=tmp / "keyring.json", dev_keyring=True, admin_token=ADMIN_TOKEN,
        relay_enabled=False, tls_dir=tmp / "pki" / "storage", host_registry=str(HOST_REGISTRY), audience=AUDIENCE,
    )
    running, close, deps = await create(settings, host_registry=host_registry())
    yield Plane(f"127.0.0.1:{running.port}", tmp / "pki", deps)
    await running.stop(0)
    await deps.store.client.drop_database(settings.mongo_db)
    await close()


async def refused(call: object) -> str:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
            assert exc.details() == DENIED_MESSAGE
        return exc.code().name
    raise AssertionError("the call succeeded")


async def journal_length(deps: Deps, who: Who) -> int:
    return await deps.store.journal.count_documents({"scope": Scope(who.tenant, who.workspace).key})


async def accepted(plane: Plane, who: Who, text: str = "Kept across the plane.") -> str:
    """A record admitted the way the services do it, each step as its own identity."""
    args = make_capture_args(idempotency_key=key("cap"), text=text, purpose_ref="purpose:test")
    captured = json.loads((await plane.stub("gateway").Capture(capture_request(who, args))).value_json)
    begun = await plane.stub("admission").BeginAdmission(begin_request(who, captured["candidate_id"]))
    worker = TaskClients.connect(Transport(plane.pki / "worker"), plane.addr, "127.0.0.1:1", timeout=10)
    outcome = json.loads(await asyncio.to_thread(run_decision, worker, begun.request_id))
    assert outcome["status"] == "accepted", outcome
    return str(outcome["record_id"])


async def test_each_identity_does_its_job_and_only_that(plane: Plane) -> None:
    who = Who()
    await plane.admin("operator").EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope), metadata=BEARER)
    record_id = await accepted(plane, who)
    events = await journal_length(plane.deps, who)
    forget = transition_request(who, "engram_memory_forget", record_id)
    for identity in ("search", "admission", "worker", "operator", "storage"):
        assert await refused(plane.stub(identity).Forget(forget)) == "PERMISSION_DENIED", identity
    assert await refused(plane.stub("gateway").FetchRecords(
        storage_pb2.FetchRecordsRequest(scope=who.scope, record_ids=[record_id]))) == "PERMISSION_DENIED"
    assert await refused(plane.stub("gateway").OpenCandidate(
        storage_pb2.OpenCandidateRequest(request_id="x"))) == "PERMISSION_DENIED"
    assert await refused(plane.stub("search").Capture(capture_request(who, make_capture_args(
        idempotency_key=key("cap"), text="Not from search.", purpose_ref="purpose:test")))) == "PERMISSION_DENIED"
    # Nothing changed: no journal event, the record is still current.
    assert await journal_length(plane.deps, who) == events
    record = await plane.deps.store.records.find_one({"_id": record_id})
    assert record["state"] == "accepted_current"
    # The search identity reads what it projects.
    fetched = await plane.stub("search").FetchRecords(storage_pb2.FetchRecordsRequest(scope=who.scope,
                                                                                     record_ids=[record_id]))
    assert len(fetched.records) == 1


async def test_admin_wants_the_operator_identity_and_the_token(plane: Plane) -> None:
    request = admin_pb2.GetScopeRequest(scope=Who().scope)
    assert await refused(plane.admin("gateway").GetScope(request, metadata=BEARER)) == "PERMISSION_DENIED"
    assert await refused(plane.admin("operator").GetScope(request)) == "UNAUTHENTICATED"  # no bearer token
    assert (await plane.admin("operator").GetScope(request, metadata=BEARER)).enabled is False


async def test_no_certificate_or_plaintext_gets_no_connection(plane: Plane) -> None:
    plain = storage_pb2_grpc.StorageServiceStub(Transport.plaintext().channel(plane.addr, "storage"))
    assert await refused(plain.GetScopePolicy(storage_pb2.GetScopePolicyRequest(scope=Who().scope),
                                              timeout=5)) == "UNAVAILABLE"


async def test_the_gateway_identity_cannot_forget_without_the_hosts_confirmation(
        plane: Plane, caplog: pytest.LogCaptureFixture) -> None:
    who = Who()
    await plane.admin("operator").EnableScope(admin_pb2.EnableScopeRequest(scope=who.scope), metadata=BEARER)
    record_id = await accepted(plane, who)
    other_id = await accepted(plane, who, "Another memory, also kept.")
    gateway = plane.stub("gateway")
    events = await journal_length(plane.deps, who)
    idem = key("fgt")
    args = {"record_id": record_id, "idempotency_key": idem, "reason_ref": "reason:test"}
    honest = transition_request(who, FORGET, record_id, idem=idem)

    def forged(caller: object, **change: str) -> storage_pb2.TransitionRequest:
        request = storage_pb2.TransitionRequest()
        request.CopyFrom(honest)
        request.caller.CopyFrom(caller)  # type: ignore[arg-type]
        for name, value in change.items():
            setattr(request, name, value)
        return request

    stranger_private, _ = generate_host_keys()  # a key the registry does not know
    stranger = mint_context(stranger_private, host_id=HOST_ID, audience=AUDIENCE, tenant=who.tenant,
                            workspace=who.workspace, principal=who.principal, agent_id="agent:t", session="s",
                            audit_id="audit-1", purpose_ref="purpose:test", tools=["engram_memory_forget"])
    attempts = {
        "no confirmation": (forged(who.caller), "gate_failed"),
        "a confirmation of another record": (
            forged(who.caller_with(who.confirmation(FORGET, other_id, {**args, "record_id": other_id}))), "gate_failed"),
        "the confirmed digest, another reason": (forged(honest.caller, reason_ref="reason:other"), "INVALID_DIGEST"),
        "another record under the same confirmation": (
            forged(honest.caller, target=other_id, operation_digest=operation_digest(
                FORGET, {**args, "record_id": other_id})), "gate_failed"),
        "no host context": (forged(who.caller_with(honest.caller.confirmation_token)), "UNAUTHORIZED"),
        "a context signed by another key": (
            forged(who.caller_with(honest.caller.confirmation_token, **{})), "UNAUTHORIZED"),
        # Eve's own valid context does not make Ada's confirmation hers...
        "a context for another principal": (forged(Who(who.tenant, who.workspace, "user:eve").caller_with(
            honest.caller.confirmation_token)), "gate_failed"),
        # ...and caller fields that differ from what the host signed are refused outright.
        "caller fields the context does not say": (forged(Who(who.tenant, who.workspace, "user:eve").caller_with(
            honest.caller.confirmation_token)), "UNAUTHORIZED"),
        "a context without the forget tool": (forged(who.caller_with(
            honest.caller.confirmation_token, tools=["engram_memory_get"])), "UNAUTHORIZED"),
    }
    attempts["no host context"][0].caller.context_token = ""
    attempts["caller fields the context does not say"][0].caller.principal = who.principal
    attempts["a context signed by another key"][0].caller.context_token = stranger
    with caplog.at_level(logging.DEBUG):
        for what, (request, code) in attempts.items():
            assert await rpc_code(gateway.Forget(request)) == code, what
    assert "storage refused: caller_mismatch" in caplog.text and "storage refused: confirmation missing" in caplog.text
    for request, _ in attempts.values():  # refusals are logged by reason, never with a token
        for token in (request.caller.context_token, request.caller.confirmation_token):
            assert not token or token.split(".")[1] not in caplog.text
    assert await journal_length(plane.deps, who) == events
    assert (await plane.deps.store.records.find_one({"_id": record_id}))["state"] == "accepted_current"
    # The honest call goes through once; the same confirmation again is spent at storage.
    done = json.loads((await gateway.Forget(honest)).value_json)
    assert done["receipt"]["to_state"] == "tombstoned"
    assert await rpc_code(gateway.Forget(honest)) == "gate_failed"
    assert await journal_length(plane.deps, who) == events + 1
