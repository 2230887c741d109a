"""End-to-end benchmark: the real stack (``engram up``) driven through the MCP client.

    python bench/e2e_bench.py [--records 200] [--searches 300] [--concurrency 4]

Prints per-tool latency percentiles, throughput, each service's resident memory, the data
sizes and the versions it ran with.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import report, rss_mib, versions  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402
from engram_cli.spawn import spawn_up  # noqa: E402
from engram_hostkit import HostFile  # noqa: E402
from engram_hostkit.client import EngramClient  # noqa: E402
from engram_hostkit.examples import make_capture_args, make_get_args, make_search_args  # noqa: E402

PURPOSE = "purpose:bench"
WORDS = ("grpc protobuf mongo redis celery journal cursor digest ledger outbox tenant scope admission "
         "receipt ranking lexical semantic budget redaction confirmation gateway worker storage search").split()


def text_for(i: int) -> str:
    picks = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12)]
    return f"Decision {i}: " + " ".join(picks) + f" because incident-{i % 37} showed it."


async def timed(samples: list[float], coro):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = await coro
    samples.append((time.perf_counter() - start) * 1000)
    return result


async def run(records: int, searches: int, concurrency: int, mcp_host: HostFile) -> list[str]:
    lines: list[str] = []
    tag = uuid.uuid4().hex[:6]
    async with EngramClient.connect(mcp_host, principal="user:bench", purpose_ref=PURPOSE) as memory:
        captures: list[float] = []
        admissions: list[float] = []
        record_ids: list[str] = []
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                args = make_capture_args(idempotency_key=f"bench-{tag}-capture-{i:06d}", text=text_for(i), purpose_ref=PURPOSE)
                cap = await timed(captures, memory.call("engram_memory_capture", args))
                cid = cap["output"]["value"]["candidate_id"]
                adm = await timed(admissions, memory.call("engram_memory_request_admission",
                                                          {"candidate_id": cid, "idempotency_key": f"bench-{tag}-admit-{i:06d}"}))
                record_ids.append(adm["output"]["value"]["outcome"]["record_id"])

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(records)))
        wall = time.perf_counter() - start
        lines.append(report("capture", captures, wall))
        lines.append(report("request_admission", admissions, wall))

        search_samples: list[float] = []

        async def search(i: int) -> None:
            async with sem:
                query = " ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(3))
                await timed(search_samples, memory.call("engram_memory_search", make_search_args(query, PURPOSE, limit=10)))

        start = time.perf_counter()
        await asyncio.gather(*(search(i) for i in range(searches)))
        lines.append(report("search (limit 10)", search_samples, time.perf_counter() - start))

        get_samples: list[float] = []

        async def get(i: int) -> None:
            async with sem:
                await timed(get_samples, memory.call("engram_memory_get", make_get_args(record_ids[i % len(record_ids)], PURPOSE)))

        start = time.perf_counter()
        await asyncio.gather(*(get(i) for i in range(searches)))
        lines.append(report("get", get_samples, time.perf_counter() - start))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ENGRAM_TASK_QUEUE": f"engram-bench-{uuid.uuid4().hex[:6]}"}
        env.pop("ENGRAM_MONGO_URL", None)
        stack = spawn_up(Path(tmp) / "engram", free_port(), env)
        try:
            lines = asyncio.run(run(opts.records, opts.searches, opts.concurrency, HostFile.load(str(stack.host_file))))
            print(f"# e2e bench: {versions()}")
            print(f"# data: records={opts.records} searches={opts.searches} gets={opts.searches} "
                  f"concurrency={opts.concurrency}; engram up ready in {stack.startup_seconds:.2f}s")
            for line in lines:
                print(line)
            for name, pid in stack.pids().items():
                print(f"rss {name:<10} {rss_mib(pid):.1f} MiB")
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
