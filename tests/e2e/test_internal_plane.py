"""The running stack's internal plane (``engram up`` makes a CA per run): a client without a
certificate gets no connection, an identity calling outside its grant is refused, and a client
holding the gateway's certificate but no host confirmation cannot forget — nothing changes."""

from __future__ import annotations

import json
import uuid

import grpc
from pymongo import MongoClient

from engram_api.common.v1 import common_pb2
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc
from engram_cli.stackstate import DEV_TENANT, DEV_WORKSPACE, StackState
from engram_core.digests import operation_digest
from engram_core.schemas.tools import TOOL_NAMES
from engram_core.transport import Transport
from engram_hostkit.examples import make_capture_args, make_request_admission_args
from engram_hostkit.hostfile import HostFile
from engram_hostkit.tokens import mint_context
from tests.e2e.conftest import RunningStack
from tests.e2e.test_scenario import PURPOSE, connect, value


async def code_of(call: object) -> str:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "OK"


async def test_the_plane_refuses_strangers_and_forgeries(stack: RunningStack) -> None:
    state = stack.state()
    tag = uuid.uuid4().hex[:8]
    async with connect(stack, "http") as memory:
        captured = value(await memory.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-plane-{tag}", text=f"The plane keeps record {tag}.", purpose_ref=PURPOSE)))
        admitted = value(await memory.call("engram_memory_request_admission", make_request_admission_args(
            captured["candidate_id"], f"e2e-plane-admit-{tag}")))
    record_id = admitted["outcome"]["record_id"]
    host = HostFile.load(str(stack.host_file))
    context = mint_context(host.private_key, host_id=host.host_id, audience=host.audience, tenant=DEV_TENANT,
                           workspace=DEV_WORKSPACE, principal="user:ada", agent_id="agent:e2e", session="s",
                           audit_id="audit-plane", purpose_ref=PURPOSE, tools=TOOL_NAMES)
    caller = common_pb2.Caller(scope=common_pb2.Scope(tenant=DEV_TENANT, workspace=DEV_WORKSPACE),
                               principal="user:ada", agent_id="agent:e2e", session="s", audit_id="audit-plane",
                               purpose_ref=PURPOSE, context_token=context)
    args = {"record_id": record_id, "idempotency_key": f"e2e-plane-forget-{tag}", "reason_ref": "reason:e2e"}
    forget = storage_pb2.TransitionRequest(caller=caller, idempotency_key=args["idempotency_key"],
                                           operation_digest=operation_digest("engram_memory_forget", args),
                                           target=record_id, reason_ref="reason:e2e")
    with MongoClient(stack.env["ENGRAM_MONGO_URL"]) as client:
        journal = client[stack.env["ENGRAM_MONGO_DB"]].journal
        events = journal.count_documents({})
        pki = StackState.load(stack.state_dir).pki_dir
        async with Transport.plaintext().channel(state["storage_addr"], "storage") as plain:
            assert await code_of(storage_pb2_grpc.StorageServiceStub(plain).Forget(forget, timeout=5)) == "UNAVAILABLE"
        async with Transport(pki / "search").channel(state["storage_addr"], "storage") as chan:
            assert await code_of(storage_pb2_grpc.StorageServiceStub(chan).Forget(forget, timeout=5)) == \
                "PERMISSION_DENIED"
        async with Transport(pki / "gateway").channel(state["storage_addr"], "storage") as chan:
            stub = storage_pb2_grpc.StorageServiceStub(chan)
            try:
                await stub.Forget(forget, timeout=5)
                raise AssertionError("a forget without the host's confirmation succeeded")
            except grpc.aio.AioRpcError as exc:
                assert dict(exc.trailing_metadata() or ())["engram-error-code"] == "gate_failed"
            # The gateway's identity reads the record it may read: the record is still there.
            got = await stub.GetRecord(storage_pb2.GetRecordRequest(caller=caller, record_id=record_id), timeout=5)
            assert json.loads(got.record_json)["record_id"] == record_id
        assert journal.count_documents({}) == events
