"""Ingest benchmark: the write path at scale through the real stack (``engram up``) and MCP.

    python bench/ingest_bench.py [--records 10000] [--concurrency 16] [--concurrency 1 ...]
                                 [--searchable-every 200] [--json]

Each run starts a fresh stack and ingests ``--records`` memories into one scope (capture +
request_admission per memory, ``--concurrency`` in flight). It prints the rate of each tenth of
the load (flat cost means the last tenth runs as fast as the first), capture and
request_admission p50/p99, the capture → searchable latency (sampled: every
``--searchable-every``-th memory is searched for by its own token until it is found), and the
disk and resident memory per memory, with the versions and data sizes it ran with. Repeat
``--concurrency`` to run several loads (a fresh stack each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cpu_seconds, percentiles, rss_mib, versions  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402
from engram_cli.spawn import SpawnedStack, spawn_up  # noqa: E402
from engram_hostkit import HostFile  # noqa: E402
from engram_hostkit.client import EngramClient  # noqa: E402
from engram_hostkit.examples import make_capture_args, make_search_args  # noqa: E402
from pymongo import MongoClient  # noqa: E402

PURPOSE = "purpose:bench"
WORDS = ("grpc protobuf mongo redis celery journal cursor digest ledger outbox tenant scope admission "
         "receipt ranking lexical semantic budget redaction confirmation gateway worker storage search").split()
SEARCHABLE_TIMEOUT_S = 30.0


def text_for(i: int, tag: str) -> str:
    picks = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12)]
    return f"Decision {i}: " + " ".join(picks) + f" because incident-{i % 37} showed it. token{tag}x{i}"


def dir_bytes(path: Path) -> dict[str, int]:
    """Bytes on disk under ``path`` by kind: the server's write-ahead log (preallocated in
    10 MiB files, so it grows in steps), its oplog, and the data and index files."""
    total = {"log": 0, "oplog": 0, "data": 0}
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                size = os.stat(os.path.join(root, name)).st_size
            except OSError:
                continue
            kind = "log" if name.startswith("WiredTigerLog.") else "oplog" if "oplog" in name else "data"
            total[kind] += size
    return total


def logical_bytes(mongo_url: str, database: str) -> dict[str, int]:
    """dataSize + indexSize of each collection of the engram database (after an fsync, so the
    files measured next are current)."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        client.admin.command("fsync")
        db = client[database]
        sizes = {}
        for name in db.list_collection_names():
            stats = db.command("collStats", name)
            sizes[name] = int(stats.get("size", 0)) + int(stats.get("totalIndexSize", 0))
        return sizes
    finally:
        client.close()


class Load:
    def __init__(self, records: int) -> None:
        self.records = records
        self.captures: list[float] = []
        self.admissions: list[float] = []
        self.searchable: list[float] = []
        self.done_at: list[float] = []
        self.failures = 0


async def ingest(memory: EngramClient, load: Load, concurrency: int, searchable_every: int, tag: str,
                 progress: bool) -> float:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(load.records):
        queue.put_nowait(i)
    start = time.perf_counter()

    async def searchable(i: int, captured_at: float) -> None:
        token = f"token{tag}x{i}"
        while time.perf_counter() - captured_at < SEARCHABLE_TIMEOUT_S:
            found = await memory.call("engram_memory_search", make_search_args(token, PURPOSE, limit=1))
            if found["output"]["value"]["records"]:
                load.searchable.append((time.perf_counter() - captured_at) * 1000)
                return
            await asyncio.sleep(0.01)

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            t0 = time.perf_counter()
            args = make_capture_args(idempotency_key=f"ingest-{tag}-c-{i:07d}", text=text_for(i, tag),
                                     purpose_ref=PURPOSE)
            cap = await memory.call("engram_memory_capture", args)
            t1 = time.perf_counter()
            if cap.get("error"):
                load.failures += 1
                continue
            cid = cap["output"]["value"]["candidate_id"]
            adm = await memory.call("engram_memory_request_admission",
                                    {"candidate_id": cid, "idempotency_key": f"ingest-{tag}-a-{i:07d}"})
            t2 = time.perf_counter()
            if adm.get("error") or adm["output"]["value"]["outcome"]["status"] != "accepted":
                load.failures += 1
                continue
            load.captures.append((t1 - t0) * 1000)
            load.admissions.append((t2 - t1) * 1000)
            load.done_at.append(t2 - start)
            if searchable_every and i % searchable_every == 0:
                await searchable(i, t0)
            if progress and len(load.done_at) % max(load.records // 20, 1) == 0:
                print(f"  … {len(load.done_at)}/{load.records} in {t2 - start:.1f}s", file=sys.stderr, flush=True)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


def tenth_rates(done_at: list[float]) -> list[float]:
    """Memories/s within each tenth of the completed load (by completion order)."""
    ordered = sorted(done_at)
    n = len(ordered)
    rates, previous = [], 0.0
    for k in range(1, 11):
        chunk = ordered[(k - 1) * n // 10:k * n // 10]
        if not chunk:
            continue
        end = chunk[-1]
        rates.append(len(chunk) / (end - previous) if end > previous else 0.0)
        previous = end
    return rates


def memory_figures(stack: SpawnedStack) -> dict[str, Any]:
    pids = stack.pids()
    rss = {name: rss_mib(pid) for name, pid in pids.items()}
    mongo_dir = stack.state_dir / "mongo"
    logical = logical_bytes(stack.state()["mongo_url"], os.environ.get("ENGRAM_MONGO_DB", "engram"))
    disk = dir_bytes(mongo_dir) if mongo_dir.exists() else {"log": 0, "oplog": 0, "data": 0}
    return {"rss_mib": rss, "disk": {**disk, "logical": sum(logical.values())}, "collections": logical,
            "rss_total_mib": sum(rss.values()), "cpu_s": {name: cpu_seconds(pid) for name, pid in pids.items()}}


def run_one(records: int, concurrency: int, searchable_every: int, progress: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ENGRAM_TASK_QUEUE": f"engram-bench-{uuid.uuid4().hex[:6]}"}
        env.pop("ENGRAM_MONGO_URL", None)
        stack = spawn_up(Path(tmp) / "engram", free_port(), env)
        try:
            before = memory_figures(stack)
            host = HostFile.load(str(stack.host_file))
            load = Load(records)
            tag = uuid.uuid4().hex[:6]

            async def drive() -> float:
                async with EngramClient.connect(host, principal="user:bench", purpose_ref=PURPOSE) as memory:
                    return await ingest(memory, load, concurrency, searchable_every, tag, progress)

            wall = asyncio.run(drive())
            after = memory_figures(stack)
        finally:
            stack.stop()
    cap, adm, srch = percentiles(load.captures), percentiles(load.admissions), percentiles(load.searchable)
    rates = tenth_rates(load.done_at)
    return {
        "records": records, "concurrency": concurrency, "wall_s": wall, "failures": load.failures,
        "rate": len(load.done_at) / wall if wall else 0.0, "tenth_rates": rates,
        "flatness": (rates[0] / rates[-1]) if rates and rates[-1] else 0.0,
        "capture_ms": cap, "admission_ms": adm, "searchable_ms": srch, "searchable_n": len(load.searchable),
        "collection_bytes_per_memory": {name: (size - before["collections"].get(name, 0)) / records
                                        for name, size in after["collections"].items()},
        "disk_per_memory": {kind: (after["disk"][kind] - before["disk"][kind]) / records for kind in after["disk"]},
        "rss_per_memory_kib": (after["rss_total_mib"] - before["rss_total_mib"]) * 1024 / records,
        "rss_mib": after["rss_mib"],
        "cpu_ms_per_memory": {name: (after["cpu_s"][name] - before["cpu_s"].get(name, 0.0)) * 1000 / records
                              for name in after["cpu_s"]},
    }


def print_result(r: dict[str, Any]) -> None:
    print(f"## ingest records={r['records']} concurrency={r['concurrency']} wall={r['wall_s']:.1f}s "
          f"failures={r['failures']}")
    print(f"rate {r['rate']:.1f} memories/s; per tenth: " + " ".join(f"{x:.1f}" for x in r["tenth_rates"])
          + f"  (first/last {r['flatness']:.2f})")
    for name, key in (("capture", "capture_ms"), ("request_admission", "admission_ms"),
                      ("capture->searchable", "searchable_ms")):
        p = r[key]
        print(f"{name:<22} p50={p['p50']:.1f}ms p95={p['p95']:.1f}ms p99={p['p99']:.1f}ms")
    disk = r["disk_per_memory"]
    print(f"disk per memory: logical {disk['logical']:.0f} B (dbStats data+indexes), data files {disk['data']:.0f} B, "
          f"oplog {disk['oplog']:.0f} B, write-ahead log {disk['log']:.0f} B")
    by_collection = sorted(r["collection_bytes_per_memory"].items(), key=lambda item: -item[1])
    print("logical bytes per memory by collection: " + " ".join(f"{k}={v:.0f}" for k, v in by_collection if v >= 1))
    print(f"rss growth per memory {r['rss_per_memory_kib']:.2f} KiB; "
          "rss " + " ".join(f"{k}={v:.0f}MiB" for k, v in sorted(r["rss_mib"].items())))
    cpu = r["cpu_ms_per_memory"]
    print(f"cpu per memory {sum(cpu.values()):.1f} ms: " + " ".join(f"{k}={v:.1f}ms" for k, v in sorted(cpu.items())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, action="append", help="memories in flight (repeatable)")
    parser.add_argument("--searchable-every", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="also print one JSON line per run")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    opts = parser.parse_args()
    print(f"# ingest bench: {versions()}")
    print(f"# data: records={opts.records} per run, one scope, capture + request_admission per memory")
    for concurrency in opts.concurrency or [16]:
        result = run_one(opts.records, concurrency, opts.searchable_every, not opts.quiet)
        print_result(result)
        if opts.json:
            print(json.dumps(result))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
