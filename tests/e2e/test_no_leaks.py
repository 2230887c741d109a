"""Non-negotiable 5 on the running stack: no plaintext memory, tokens or secrets in the
services' logs, in Redis (task messages, results, replay keys) or in the journal."""

from __future__ import annotations

import uuid

import redis

from engram_hostkit import HostFile
from engram_hostkit.examples import make_capture_args, make_forget_args, make_get_args, make_request_admission_args, make_search_args
from tests.e2e.conftest import RunningStack
from tests.e2e.test_scenario import PURPOSE, connect, until, value


async def test_nothing_sensitive_leaves_in_logs_or_redis(stack: RunningStack) -> None:
    marker = "Quasar" + uuid.uuid4().hex[:12]
    async with connect(stack, "http") as memory:
        capture = make_capture_args(idempotency_key=f"leak-{marker}", text=f"{marker} is the launch codename.", purpose_ref=PURPOSE)
        candidate_id = value(await memory.call("engram_memory_capture", capture))["candidate_id"]
        outcome = value(await memory.call("engram_memory_request_admission",
                                          make_request_admission_args(candidate_id, f"leak-admit-{marker}")))["outcome"]
        value(await memory.call("engram_memory_search", make_search_args(marker, PURPOSE)))
        value(await memory.call("engram_memory_get", make_get_args(outcome["record_id"], PURPOSE)))
        forget = make_forget_args(outcome["record_id"], f"leak-forget-{marker}")
        await until(lambda: memory.call("engram_memory_forget", forget, approver="human:ada"),
                    lambda v: v["projection_invalidation"] == "complete")
        token = memory.context()
    host = HostFile.load(str(stack.host_file))
    secrets = {
        "marker": marker,
        "host private key": host.private_key,
        "admin token": (stack.state_dir / "admin-token").read_text().strip(),
        "cursor key": (stack.state_dir / "cursor-key").read_text().strip(),
        "context token prefix": token.split(".")[0] + "." + token.split(".")[1][:40],
    }
    logs = {p.name: p.read_text(errors="replace") for p in (stack.state_dir / "logs").glob("*.log")}
    assert set(logs) >= {"storage.log", "search.log", "admission.log", "worker.log", "gateway.log"}
    for name, text in logs.items():
        for what, secret in secrets.items():
            assert secret not in text, f"{what} in {name}"
    client = redis.Redis.from_url(stack.state()["redis_url"])
    try:
        for key in client.scan_iter(count=1000):
            assert marker.encode() not in key
            kind = client.type(key)
            if kind == b"string":
                blob = client.get(key) or b""
            elif kind == b"list":
                blob = b"".join(client.lrange(key, 0, -1))
            elif kind == b"hash":
                blob = b"".join(k + v for k, v in client.hgetall(key).items())
            else:
                continue
            for what, secret in secrets.items():
                assert secret.encode() not in blob, f"{what} in redis key {key!r}"
    finally:
        client.close()
