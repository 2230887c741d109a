"""Two search replicas behind one gateway (``engram up --search-replicas 2``): a record is
found on both, a forget makes it invisible on both before its answer, the worker's
invalidation reaches both, and the coverage receipt names both; an operator's projection
rebuild (``engram admin rebuild-projection``) reaches both, and each builds the scope again."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid

from pymongo import MongoClient

from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2, search_pb2_grpc
from engram_cli.stackstate import DEV_TENANT, DEV_WORKSPACE, StackState
from engram_core.canonical import canonicalize
from engram_core.schemas.validate import with_defaults
from engram_core.taskq import INVALIDATE_PROJECTION
from engram_hostkit.examples import make_capture_args, make_forget_args, make_request_admission_args, make_search_args
from tests.e2e.conftest import RunningStack
from tests.e2e.test_scenario import PURPOSE, connect, until, value


async def found_on(stack: RunningStack, replica: str, query: str, tenant: str = DEV_TENANT) -> list[str]:
    """The record ids one replica answers for ``query`` (called directly, as the gateway does)."""
    caller = common_pb2.Caller(scope=common_pb2.Scope(tenant=tenant, workspace=DEV_WORKSPACE),
                               principal="user:ada", purpose_ref=PURPOSE)
    args = with_defaults("engram_memory_search", make_search_args(query, PURPOSE))
    async with StackState.load(stack.state_dir).transport("gateway").channel(replica, "search") as channel:
        reply = await search_pb2_grpc.SearchServiceStub(channel).Search(
            search_pb2.SearchRequest(caller=caller, arguments_json=canonicalize(args)), timeout=20)
    return [packet["record"]["record_id"] for packet in json.loads(reply.value_json)["records"]]


async def test_forget_reaches_every_search_replica(stack: RunningStack) -> None:
    replicas = stack.state()["search_replicas"]
    assert len(replicas) == 2
    tag = uuid.uuid4().hex[:8]
    query = f"lighthouse beacon {tag}"
    async with connect(stack, "http") as memory:
        captured = value(await memory.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-replica-{tag}-0001", text=f"The lighthouse beacon {tag} turns every 20 s.",
            purpose_ref=PURPOSE)))
        admitted = value(await memory.call("engram_memory_request_admission", make_request_admission_args(
            captured["candidate_id"], f"e2e-replica-admit-{tag}")))
        record_id = admitted["outcome"]["record_id"]
        # Both replicas hold it (each built its projection of the scope) and rank it first (the
        # semantic channel may list the dev scope's other records below it).
        orders = [await found_on(stack, replica, query) for replica in replicas]
        assert orders[0][:1] == [record_id] and orders[1] == orders[0]
        # Through the gateway, searches alternate between the replicas and agree.
        for _ in range(4):
            found = value(await memory.call("engram_memory_search", make_search_args(query, PURPOSE)))
            assert [p["record"]["record_id"] for p in found["records"]] == orders[0]

        forget = make_forget_args(record_id, f"e2e-replica-forget-{tag}")
        await memory.call("engram_memory_forget", forget, approver="human:ada")
        # Gone on both at once (each replica catches up to the journal head before answering).
        for replica in replicas:
            assert record_id not in await found_on(stack, replica, query)
        finished = await until(lambda: memory.call("engram_memory_forget", forget, approver="human:ada"),
                               lambda v: v["projection_invalidation"] == "complete")

    with MongoClient(stack.env["ENGRAM_MONGO_URL"]) as client:
        row = client[stack.env["ENGRAM_MONGO_DB"]].outbox.find_one(
            {"object_id": record_id, "task": INVALIDATE_PROJECTION})
    receipt = row["coverage_receipt"]
    assert receipt["receipt_digest"] == finished["coverage_receipt_digest"]
    host = socket.gethostname()
    assert receipt["replicas"] == sorted(f"{host}:{addr.rsplit(':', 1)[1]}" for addr in replicas)
    assert receipt["surfaces"] == ["lexical_index", "page_cache", "vectors"]


def admin(stack: RunningStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(stack.state_dir),
                           *args], env=stack.env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)


async def test_a_projection_rebuild_reaches_every_replica(stack: RunningStack) -> None:
    replicas = stack.state()["search_replicas"]
    tag = uuid.uuid4().hex[:8]
    tenant = f"rebuild-{tag}"  # its own scope: the shared dev scope is not rebuilt under other tests
    where = ("--tenant", tenant, "--workspace", DEV_WORKSPACE)
    assert admin(stack, "enable", *where).returncode == 0
    time.sleep(1.1)  # the gateway re-reads the host registry (the dev host's tenants) once a second
    query = f"tide gauge {tag}"
    async with connect(stack, "http", tenant=tenant) as memory:
        captured = value(await memory.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-rebuild-{tag}", text=f"The tide gauge {tag} reads in centimetres.",
            purpose_ref=PURPOSE)))
        admitted = value(await memory.call("engram_memory_request_admission", make_request_admission_args(
            captured["candidate_id"], f"e2e-rebuild-admit-{tag}")))
        record_id = admitted["outcome"]["record_id"]
    for replica in replicas:
        assert await found_on(stack, replica, query, tenant) == [record_id]
    # It asks first; without a terminal and without --yes nothing happens.
    asked = admin(stack, "rebuild-projection", *where, "--reason", f"ticket:{tag}")
    assert asked.returncode == 2 and "--yes" in asked.stderr
    done = admin(stack, "rebuild-projection", *where, "--reason", f"ticket:{tag}", "--wait", "60", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    host = socket.gethostname()
    assert answer["projection_invalidation"] == "complete"
    assert answer["replicas"] == sorted(f"{host}:{addr.rsplit(':', 1)[1]}" for addr in replicas)
    # Each replica dropped the scope and builds it again from the journal on its next search.
    for replica in replicas:
        assert await found_on(stack, replica, query, tenant) == [record_id]
    history = admin(stack, "history", *where, "--object", "projection")
    assert history.returncode == 0 and "projection_rebuild" in history.stdout and "operator" in history.stdout
    table = admin(stack, "rebuild-projection", *where, "--reason", f"ticket:{tag}", "--yes")
    assert table.returncode == 0 and "projection dropped on 2 replicas" in table.stdout, table.stdout
    unknown = admin(stack, "rebuild-projection", "--tenant", f"none-{tag}", "--workspace", DEV_WORKSPACE,
                    "--reason", f"ticket:{tag}", "--yes")
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr
    bad_wait = admin(stack, "rebuild-projection", *where, "--reason", f"ticket:{tag}", "--wait", "61", "--yes")
    assert bad_wait.returncode == 2
