"""Search at scale: the real stack (``engram up``), populated through the real write path,
searched through MCP and directly over gRPC.

    python bench/search_scale_bench.py --sizes 1000,10000,100000 [--scopes 10 --scope-records 10000]
                                       [--queries 300] [--load-concurrency 24]

One scope grows to each size in turn (capture over StorageService gRPC, admission over
AdmissionService gRPC: a real Celery worker decides every record); at each size it prints the
load rate, MCP search p50/p95/p99 at concurrency 1 and throughput at concurrency 4, direct
gRPC search latency, and the search process's resident memory per record. Then it kills the
search process (``engram up`` restarts it) and times the cold rebuild of the largest scope.
``--scopes N`` adds N more scopes of ``--scope-records`` each, times each one's first search
(it builds the scope's projection), then measures the same figures with the searches spread
over them round robin (one MCP host client per scope); ``--sizes ''`` skips the main scope
(``--sizes '' --scopes 10`` is the 10 × 10k case). ``--state-dir DIR`` keeps the stack's
databases in DIR: a later run on DIR (another commit, say) starts the stack on them and loads
only what the main scope still lacks for each size, so 100k is loaded once, not per run.
Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402

from bench.common import BENCH_PRINCIPAL, BENCH_PURPOSE, HostSigner, Scope, capture_and_admit, cpu_seconds, machine, report, rss_mib, versions  # noqa: E402
from bench.search_bench import make_vocabulary  # noqa: E402
from engram_api.admission.v1 import admission_pb2_grpc  # noqa: E402
from engram_api.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram_api.storage.v1 import storage_pb2_grpc  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402
from engram_cli.spawn import SpawnedStack, spawn_up  # noqa: E402
from engram_cli.stackstate import DEV_TENANT, DEV_WORKSPACE, StackState  # noqa: E402
from engram_core.canonical import canonicalize  # noqa: E402
from engram_core.grpc_errors import error_from_rpc  # noqa: E402
from engram_core.schemas.validate import with_defaults  # noqa: E402
from engram_hostkit import HostFile  # noqa: E402
from engram_hostkit.client import EngramClient  # noqa: E402
from engram_hostkit.examples import make_capture_args, make_search_args  # noqa: E402

PURPOSE = BENCH_PURPOSE
PRINCIPAL = BENCH_PRINCIPAL


class Corpus:
    """Zipf-distributed texts and queries over a 20k-word vocabulary (fixed seed)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words, self.cum = make_vocabulary(self.rng, 20_000)

    def text(self, i: int) -> str:
        words = self.rng.choices(self.words, cum_weights=self.cum, k=self.rng.randint(12, 50))
        return f"Memory {i}: " + " ".join(words)

    def query(self) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self.cum, k=self.rng.randint(2, 4)))


async def load(scope: Scope, corpus: Corpus, count: int, concurrency: int, storage: Any, admission: Any,
               tag: str, progress: bool, pids: dict[str, int]) -> tuple[float, dict[str, float]]:
    """Capture and admit ``count`` more records; returns records per second and each of
    ``pids``' CPU milliseconds per record."""
    sem = asyncio.Semaphore(concurrency)
    used = {name: cpu_seconds(pid) for name, pid in pids.items()}
    start = time.perf_counter()
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        async with sem:
            args = make_capture_args(idempotency_key=f"bench-{tag}-{i:07d}", text=corpus.text(i), purpose_ref=PURPOSE)
            outcome = await capture_and_admit(storage, admission, scope, args, f"bench-{tag}-adm-{i:07d}")
            if outcome["status"] != "accepted":
                raise RuntimeError(f"record {i} not accepted: {outcome['status']}")
            done += 1
            if progress and done % 1000 == 0:
                rate = done / (time.perf_counter() - start)
                print(f"#   loaded {scope.records + done}/{scope.records + count} ({rate:.1f}/s)", file=sys.stderr,
                      flush=True)

    await asyncio.gather(*(one(scope.records + i) for i in range(count)))
    seconds = time.perf_counter() - start
    cpu = {name: (cpu_seconds(pid) - used[name]) * 1000 / max(count, 1) for name, pid in pids.items()}
    scope.records += count
    return count / seconds, cpu


def cpu_line(label: str, cpu: dict[str, float]) -> str:
    """``label``: each process's CPU milliseconds, largest first (the tiny ones left out)."""
    ranked = sorted(((ms, name) for name, ms in cpu.items() if ms >= 0.005), reverse=True)
    return f"{label} (ms): " + " ".join(f"{name}={ms:.2f}" for ms, name in ranked)


def search_request(scope: Scope, query: str) -> search_pb2.SearchRequest:
    args = with_defaults("engram_memory_search", make_search_args(query, PURPOSE))
    return search_pb2.SearchRequest(caller=scope.search_caller, arguments_json=canonicalize(args))


async def direct_search(stub: Any, scope: Scope, query: str, timeout: float = 30.0) -> int:
    reply = await stub.Search(search_request(scope, query), timeout=timeout)
    return len(json.loads(reply.value_json)["records"])


async def until_answered(stub: Any, scope: Scope, query: str) -> None:
    """Search until an answer, while the scope builds: each call waits up to its deadline (60 s)
    and answers PROJECTION_STALE while the build goes on; a restarting replica or a connection
    at its maximum age answers UNAVAILABLE."""
    while True:
        try:
            await direct_search(stub, scope, query, timeout=60)
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE and not error_from_rpc(exc).retriable:
                raise
            await asyncio.sleep(0.05)


async def measure(stack: SpawnedStack, scopes: list[Scope], corpus: Corpus, queries: int,
                  search_stub: Any) -> dict[str, Any]:
    """``queries`` searches over ``scopes`` round robin: direct gRPC at concurrency 1, then MCP
    (one host client per scope) at concurrency 1 and 4. Each scope is caught up first (not timed)."""
    texts = [corpus.query() for _ in range(queries)]
    start = time.perf_counter()
    for scope in scopes:
        await until_answered(search_stub, scope, texts[0])
    catch_up = time.perf_counter() - start
    direct: list[float] = []
    for i, text in enumerate(texts):
        start = time.perf_counter()
        await direct_search(search_stub, scopes[i % len(scopes)], text)
        direct.append((time.perf_counter() - start) * 1000)
    host = HostFile.load(str(stack.host_file))
    mcp: list[float] = []
    async with contextlib.AsyncExitStack() as clients:
        memories = [await clients.enter_async_context(EngramClient.connect(
            host, principal=PRINCIPAL, purpose_ref=PURPOSE, tenant=s.tenant, workspace=s.workspace)) for s in scopes]

        async def call(i: int, text: str) -> float:
            start = time.perf_counter()
            envelope = await memories[i % len(memories)].call("engram_memory_search", make_search_args(text, PURPOSE))
            if not envelope["ok"]:
                raise RuntimeError(f"search failed: {envelope['error']['code']}")
            return (time.perf_counter() - start) * 1000

        for i, text in enumerate(texts[:20]):  # warm-up
            await call(i, text)
        pids = {"client": os.getpid(), **stack.pids()}
        used = {name: cpu_seconds(pid) for name, pid in pids.items()}
        for i, text in enumerate(texts):
            mcp.append(await call(i, text))
        cpu = {name: (cpu_seconds(pid) - used[name]) * 1000 / len(texts) for name, pid in pids.items()}

        sem = asyncio.Semaphore(4)
        parallel: list[float] = []

        async def one(i: int, text: str) -> None:
            async with sem:
                parallel.append(await call(i, text))

        start = time.perf_counter()
        await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
        wall4 = time.perf_counter() - start
    return {"mcp": mcp, "direct": direct, "parallel": parallel, "wall4": wall4, "catch_up": catch_up, "cpu": cpu}


def print_figures(figures: dict[str, Any]) -> None:
    print(f"first search (catches the projection up with what was loaded, embedding included): "
          f"{figures['catch_up']:.1f} s")
    print(report("mcp search c=1", figures["mcp"], sum(figures["mcp"]) / 1000))
    # Where a c=1 search's time goes: each process's CPU per search (the client is this process,
    # the official MCP client; the processes run one after another along a call).
    print(cpu_line("cpu per mcp search c=1", figures["cpu"]))
    print(report("mcp search c=4", figures["parallel"], figures["wall4"]))
    print(report("grpc search c=1", figures["direct"], sum(figures["direct"]) / 1000))


async def cold_rebuild(stack: SpawnedStack, scope: Scope, search_addr: str,
                       profile_dir: Path | None = None) -> tuple[float, float, list[str]]:
    """Kill the search process, wait for its restart, time the first full answer; with
    ``profile_dir``, py-spy samples the new search process, storage and the MongoDB-protocol
    server meanwhile (their top functions are returned)."""
    pid = stack.pids()["search"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while stack.pids().get("search") == pid and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    names = ("search", "storage", "mongodb")
    spies = [] if profile_dir is None else await start_spies(stack, names, profile_dir)
    chan = StackState.load(stack.state_dir).transport("gateway").channel(search_addr, "search")
    stub = search_pb2_grpc.SearchServiceStub(chan)
    start = time.perf_counter()
    await until_answered(stub, scope, "memory")
    seconds = time.perf_counter() - start
    await chan.close()
    lines = await stop_spies(spies, names, profile_dir) if profile_dir is not None else []
    return seconds, rss_mib(stack.pids()["search"]), lines


async def start_spies(stack: SpawnedStack, names: tuple[str, ...], out: Path,
                      seconds: float | None = None) -> list[asyncio.subprocess.Process]:
    """py-spy recording each named child into ``out/<name>.txt`` (raw collapsed stacks), for
    ``seconds`` or until :func:`stop_spies`."""
    out.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise SystemExit("--profile needs py-spy in the environment (uv pip install py-spy)")
    duration = ["--duration", str(int(seconds))] if seconds is not None else []
    pids = {**stack.pids(), "client": os.getpid()}  # "client": this process, the MCP host's side
    procs = [await asyncio.create_subprocess_exec(
        str(spy), "record", "--pid", str(pids[n]), *duration, "--rate", "250",
        "--format", "raw", "--output", str(out / f"{n}.txt"), "--nonblocking",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL) for n in names]
    await asyncio.sleep(1.0)  # attached before the work starts
    return procs


async def stop_spies(procs: list[asyncio.subprocess.Process], names: tuple[str, ...], out: Path,
                     stop: bool = True) -> list[str]:
    """Stop (SIGINT: py-spy writes what it sampled) or await the recorders; each one's top
    functions."""
    for proc in procs:
        if stop and proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        await proc.wait()
    lines: list[str] = []
    for name in names:
        lines += [f"# {name}: {line}" for line in top_functions(out / f"{name}.txt")]
    return lines


async def profile(stack: SpawnedStack, scope: Scope, corpus: Corpus, seconds: float, out: Path) -> list[str]:
    """MCP searches at concurrency 1 for ``seconds`` while py-spy samples the gateway, search
    and storage processes and this one (the official MCP client: ``client``); each profile's
    collapsed stacks go to ``out/<name>.txt`` and the top functions by inclusive share are
    returned."""
    names = ("client", "gateway", "search", "storage")
    procs = await start_spies(stack, names, out, seconds)
    host = HostFile.load(str(stack.host_file))
    calls = 0
    async with EngramClient.connect(host, principal=PRINCIPAL, purpose_ref=PURPOSE, tenant=scope.tenant,
                                    workspace=scope.workspace) as memory:
        deadline = time.monotonic() + seconds - 1.0
        while time.monotonic() < deadline:
            await memory.call("engram_memory_search", make_search_args(corpus.query(), PURPOSE))
            calls += 1
    lines = [f"## profile: {calls} MCP searches in {seconds:.0f} s (py-spy, collapsed stacks in {out})"]
    return lines + await stop_spies(procs, names, out, stop=False)


# A sample whose innermost frame is one of these is a thread waiting, not working (``_worker``:
# a pool thread blocked on its queue).
IDLE_LEAVES = frozenset({"select", "poll", "wait", "_wait_for_tstate_lock", "_recv_exactly", "_worker"})


def top_functions(path: Path, count: int = 25) -> list[str]:
    """The functions present in the most samples (inclusive), from py-spy's raw output; idle
    samples (a thread waiting in select/epoll, a lock or a socket read) left out."""
    inclusive: dict[str, int] = {}
    busy = 0
    for line in path.read_text().splitlines() if path.exists() else []:
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if frames[-1].split(" (", 1)[0].rsplit(".", 1)[-1] in IDLE_LEAVES:
            continue
        busy += int(n)
        for frame in {re.sub(r":\d+\)$", ")", f) for f in frames}:  # per function, not per line
            inclusive[frame] = inclusive.get(frame, 0) + int(n)
    ranked = sorted(inclusive.items(), key=lambda kv: -kv[1])[:count]
    return [f"busy samples {busy}"] + [f"{100 * v / max(busy, 1):5.1f}% {k}" for k, v in ranked]


class LoadedRecords:
    """How many records the main scope of a kept stack (``--state-dir``) holds from earlier
    runs: ``bench-loaded.json`` beside the stack's state, written after each size has loaded."""

    def __init__(self, state_dir: Path) -> None:
        self._path = state_dir / "bench-loaded.json"
        self._count = json.loads(self._path.read_text())["main_scope_records"] if self._path.exists() else 0

    @property
    def count(self) -> int:
        return self._count

    @count.setter
    def count(self, value: int) -> None:
        self._count = value
        self._path.write_text(json.dumps({"main_scope_records": value}))


def semantic_channel() -> str:
    """The search service's semantic channel as this environment sets it for ``engram up``."""
    on = os.environ.get("ENGRAM_SEMANTIC_CHANNEL", "true").strip().lower() not in ("false", "0", "no", "off")
    return "on" if on else "off (ENGRAM_SEMANTIC_CHANNEL)"


async def run(opts: argparse.Namespace, stack: SpawnedStack) -> None:
    state = stack.state()
    gateway = StackState.load(stack.state_dir).transport("gateway")  # the benchmark calls as the gateway does
    storage_chan, admission_chan, search_chan = (gateway.channel(state[f"{k}_addr"], k)
                                                 for k in ("storage", "admission", "search"))
    storage = storage_pb2_grpc.StorageServiceStub(storage_chan)
    admission = admission_pb2_grpc.AdmissionServiceStub(admission_chan)
    search = search_pb2_grpc.SearchServiceStub(search_chan)
    corpus = Corpus(opts.seed)
    tag = uuid.uuid4().hex[:6]
    main_scope = Scope(DEV_TENANT, DEV_WORKSPACE, principal=PRINCIPAL, purpose_ref=PURPOSE,
                       signer=HostSigner.of_stack(stack))
    loaded = LoadedRecords(stack.state_dir)
    main_scope.records = loaded.count
    for i in range(main_scope.records):  # the texts an earlier run loaded: the next ones follow on
        corpus.text(i)
    search_pid = stack.pids()["search"]
    rss_empty = rss_mib(search_pid)
    print(f"# search scale bench: {versions()}")
    print(f"# machine: {machine()}")
    print(f"# data: sizes={opts.sizes} queries={opts.queries} load_concurrency={opts.load_concurrency} "
          f"texts=12-50 Zipf words of 20k, queries=2-4 Zipf words, page limit 10, one search replica, "
          f"semantic channel {semantic_channel()}")
    print(f"# search process RSS empty: {rss_empty:.1f} MiB")
    for size in opts.sizes:
        spies: list[asyncio.subprocess.Process] = []
        load_names = tuple(sorted({*stack.pids(), "client"}))
        count = max(0, size - main_scope.records)
        if opts.profile_load and count:
            spies = await start_spies(stack, load_names, opts.profile_load / str(size))
        rate, load_cpu = await load(main_scope, corpus, count, opts.load_concurrency, storage, admission, tag,
                                    opts.progress, {"client": os.getpid(), **stack.pids()})
        loaded.count = main_scope.records
        if spies:
            print(f"## load profile to {size} records (py-spy, collapsed stacks in {opts.profile_load / str(size)})")
            for line in await stop_spies(spies, load_names, opts.profile_load / str(size)):
                print(line)
        figures = await measure(stack, [main_scope], corpus, opts.queries, search)
        rss = rss_mib(search_pid)
        if count:
            print(f"## one scope, {main_scope.records} records (load {rate:.1f} records/s through storage + admission "
                  f"gRPC)")
            print(cpu_line("cpu per loaded record", load_cpu))
        else:
            print(f"## one scope, {main_scope.records} records (held in {stack.state_dir} from an earlier run)")
        print_figures(figures)
        print(f"search RSS {rss:.1f} MiB: {(rss - rss_empty) * 2**20 / main_scope.records:.0f} B/record over the "
              f"empty process")
        if opts.profile:
            for line in await profile(stack, main_scope, corpus, opts.profile_seconds, opts.profile / str(size)):
                print(line)
    scopes: list[Scope] = []
    if opts.scopes:
        for n in range(opts.scopes):
            extra = Scope(f"bench-{tag}-{n}", "default", principal=PRINCIPAL, purpose_ref=PURPOSE).enable(stack)
            rate, _ = await load(extra, corpus, opts.scope_records, opts.load_concurrency, storage, admission,
                                 f"{tag}-s{n}", opts.progress, {})
            scopes.append(extra)
            print(f"# scope {n + 1}/{opts.scopes}: {opts.scope_records} records at {rate:.1f}/s", file=sys.stderr)
        # Each scope's first search builds its projection (none was searched while loading).
        builds: list[float] = []
        for scope in scopes:
            start = time.perf_counter()
            await until_answered(search, scope, corpus.query())
            builds.append((time.perf_counter() - start) * 1000)
        print(f"## {opts.scopes} more scopes of {opts.scope_records} records, searched round robin")
        print(report("first search (builds)", builds, sum(builds) / 1000))
        print_figures(await measure(stack, scopes, corpus, opts.queries, search))
        rss = rss_mib(search_pid)
        total = main_scope.records + opts.scopes * opts.scope_records
        print(f"search RSS {rss:.1f} MiB for {total} records: {(rss - rss_empty) * 2**20 / total:.0f} B/record")
    largest = max([main_scope, *scopes], key=lambda s: s.records)
    seconds, rss, lines = await cold_rebuild(stack, largest, state["search_addr"],
                                             opts.profile / "rebuild" if opts.profile else None)
    print(f"## cold rebuild of the {largest.records}-record scope after a search restart: {seconds:.1f} s "
          f"({largest.records / seconds:.0f} records/s), RSS after {rss:.1f} MiB")
    for line in lines:
        print(line)
    for chan in (storage_chan, admission_chan, search_chan):
        await chan.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",") if x], default=[1000, 10000],
                        help="sizes the main scope grows to in turn ('' : none, e.g. with --scopes)")
    parser.add_argument("--scopes", type=int, default=0)
    parser.add_argument("--scope-records", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--load-concurrency", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--progress", action="store_true", help="print load progress to stderr")
    parser.add_argument("--profile", type=Path, help="after each size, profile MCP searches with py-spy into this folder (and the cold rebuild)")
    parser.add_argument("--profile-seconds", type=float, default=20.0)
    parser.add_argument("--profile-load", type=Path,
                        help="profile every process of the stack with py-spy while each size loads, into this folder")
    parser.add_argument("--state-dir", type=Path,
                        help="keep the stack (its databases) in this folder instead of a temporary one; a later run "
                             "with the same folder tops the main scope up to each size instead of loading it again")
    opts = parser.parse_args()
    if opts.sizes != sorted(opts.sizes):
        parser.error("--sizes must grow")
    env = {k: v for k, v in os.environ.items() if k not in ("ENGRAM_MONGO_URL", "ENGRAM_REDIS_URL")}
    with contextlib.ExitStack() as cleanup:
        state_dir = opts.state_dir or Path(cleanup.enter_context(tempfile.TemporaryDirectory())) / "engram"
        stack = spawn_up(state_dir, free_port(), env)
        try:
            asyncio.run(run(opts, stack))
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
