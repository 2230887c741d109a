"""Admission benchmark: decisions per second with one worker, through the real stack and MCP.

    python bench/admission_bench.py [--candidates 400] [--concurrency 16] [--concurrency 1 ...]

Each run starts a fresh stack (one worker process, ``ENGRAM_WORKER_CONCURRENCY`` threads),
captures ``--candidates`` memories first, then requests admission for all of them with
``--concurrency`` calls in flight: the decisions per second of that phase, request_admission
p50/p95/p99 (each call waits for its decision), the worker's CPU per decision, and the
capture → searchable latency of a sample of the admitted memories. ``bench/screening_bench.py``
measures the screening inside each decision on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cpu_seconds, percentiles, versions  # noqa: E402
from bench.ingest_bench import PURPOSE, text_for  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402
from engram_cli.spawn import spawn_up  # noqa: E402
from engram_hostkit import HostFile  # noqa: E402
from engram_hostkit.client import EngramClient  # noqa: E402
from engram_hostkit.examples import make_capture_args, make_request_admission_args, make_search_args  # noqa: E402

SEARCHABLE_SAMPLES = 20


async def phases(memory: EngramClient, candidates: int, concurrency: int, tag: str) -> dict[str, Any]:
    captured: list[tuple[int, str, float]] = []
    for i in range(candidates):
        args = make_capture_args(idempotency_key=f"adm-bench-{tag}-c-{i:07d}", text=text_for(i, tag), purpose_ref=PURPOSE)
        reply = await memory.call("engram_memory_capture", args)
        captured.append((i, reply["output"]["value"]["candidate_id"], time.perf_counter()))
    queue: asyncio.Queue[tuple[int, str, float]] = asyncio.Queue()
    for item in captured:
        queue.put_nowait(item)
    latencies: list[float] = []
    statuses: dict[str, int] = {}

    async def admit() -> None:
        while True:
            try:
                i, cid, _ = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.perf_counter()
            reply = await memory.call("engram_memory_request_admission",
                                      make_request_admission_args(cid, f"adm-bench-{tag}-a-{i:07d}"))
            latencies.append((time.perf_counter() - t0) * 1000)
            status = reply["output"]["value"]["outcome"]["status"] if reply.get("ok") else reply["error"]["code"]
            statuses[status] = statuses.get(status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(admit() for _ in range(concurrency)))
    wall = time.perf_counter() - started

    # Capture → searchable, sampled on fresh memories (capture, admit, then search until found).
    searchable: list[float] = []
    for n in range(SEARCHABLE_SAMPLES):
        i = candidates + n
        t0 = time.perf_counter()
        args = make_capture_args(idempotency_key=f"adm-bench-{tag}-s-{i:07d}", text=text_for(i, tag), purpose_ref=PURPOSE)
        cid = (await memory.call("engram_memory_capture", args))["output"]["value"]["candidate_id"]
        await memory.call("engram_memory_request_admission", make_request_admission_args(cid, f"adm-bench-{tag}-sa-{i:07d}"))
        while time.perf_counter() - t0 < 30:
            found = await memory.call("engram_memory_search", make_search_args(f"token{tag}x{i}", PURPOSE, limit=1))
            if found["output"]["value"]["records"]:
                searchable.append((time.perf_counter() - t0) * 1000)
                break
            await asyncio.sleep(0.005)
    return {"wall_s": wall, "latencies": latencies, "statuses": statuses, "searchable": searchable}


def run_one(candidates: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ENGRAM_TASK_QUEUE": f"engram-bench-{uuid.uuid4().hex[:6]}"}
        env.pop("ENGRAM_MONGO_URL", None)
        stack = spawn_up(Path(tmp) / "engram", free_port(), env)
        try:
            host = HostFile.load(str(stack.host_file))
            worker = stack.pids()["worker"]

            async def drive() -> dict[str, Any]:
                async with EngramClient.connect(host, principal="user:bench", purpose_ref=PURPOSE) as memory:
                    cpu_before = cpu_seconds(worker)
                    result = await phases(memory, candidates, concurrency, uuid.uuid4().hex[:6])
                    result["worker_cpu_s"] = cpu_seconds(worker) - cpu_before
                    return result

            result = asyncio.run(drive())
        finally:
            stack.stop()
    return {"candidates": candidates, "concurrency": concurrency, **result}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=400)
    parser.add_argument("--concurrency", type=int, action="append")
    opts = parser.parse_args()
    print(f"# admission bench: {versions(('detect-secrets',))}")
    for concurrency in opts.concurrency or [16]:
        r = run_one(opts.candidates, concurrency)
        p, s = percentiles(r["latencies"]), percentiles(r["searchable"])
        decisions = len(r["latencies"])
        print(f"# data: candidates={r['candidates']} (~{len(text_for(0, 'x'))} B each), concurrency={concurrency}, one worker")
        print(f"decisions        n={decisions} wall={r['wall_s']:.1f}s throughput={decisions / r['wall_s']:.1f}/s "
              f"statuses={r['statuses']}")
        print(f"request_admission p50={p['p50']:.1f}ms p95={p['p95']:.1f}ms p99={p['p99']:.1f}ms")
        print(f"worker cpu       {r['worker_cpu_s'] * 1000 / max(decisions + 2 * SEARCHABLE_SAMPLES, 1):.2f} ms/decision")
        print(f"capture→searchable n={len(r['searchable'])} p50={s['p50']:.1f}ms p95={s['p95']:.1f}ms p99={s['p99']:.1f}ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
