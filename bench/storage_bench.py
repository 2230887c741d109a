"""Storage benchmark: the StorageService over real gRPC on loopback against a MongoDB-protocol
server (SecantusDB, its own process, unless --mongo-url), with no gateway in front.

    python bench/storage_bench.py [--records 1000] [--concurrency 4] [--json]

Measures capture (encrypt + journal + ledger in one transaction), admission (begin, open,
commit: decrypt, seal the record, journal), get, a journal page of 1,000 events, forget and
the expiry sweep (every other record carries an ``expires_at``; storage's clock is moved past
it and SweepExpired is called with batches of 500 until nothing is due).
Write-cost flatness: capture p50 over the first and the last tenth of the records. Prints
p50/p95/p99, throughput, the process's resident memory, data sizes and versions.
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
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pymongo import monitoring  # noqa: E402

from bench.common import HostSigner, percentiles, report, rss_mib, versions  # noqa: E402
from bench.common import Scope as BenchScope  # noqa: E402
from engram_api.storage.v1 import storage_pb2, storage_pb2_grpc  # noqa: E402
from engram_cli import datastores  # noqa: E402
from engram_core.canonical import canonicalize  # noqa: E402
from engram_core.digests import operation_digest  # noqa: E402
from engram_core.hosts import upsert_host  # noqa: E402
from engram_core.timefmt import format_instant, now_ms  # noqa: E402
from engram_core.transport import Transport  # noqa: E402
from engram_hostkit.examples import make_capture_args  # noqa: E402
from engram_hostkit.keys import generate_host_keys  # noqa: E402
from storage_service.server import create  # noqa: E402
from storage_service.settings import StorageSettings  # noqa: E402
from storage_service.store import Scope  # noqa: E402

PURPOSE = "purpose:bench"


class CommandCounter(monitoring.CommandListener):
    """Counts the MongoDB commands the storage service sends, by name (the hops per memory)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.counts[event.command_name] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def take(self) -> Counter[str]:
        taken, self.counts = self.counts, Counter()
        return taken


COMMANDS = CommandCounter()
monitoring.register(COMMANDS)


async def timed(samples: list[float], coro: Any) -> Any:
    start = time.perf_counter()
    result = await coro
    samples.append((time.perf_counter() - start) * 1000)
    return result


async def run(mongo_url: str, records: int, concurrency: int, tmp: Path) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    # The bench is the host: storage verifies the context (and a forget's confirmation) it signs.
    private, public = generate_host_keys()
    signer = HostSigner("bench-host", private, "engram-bench")
    scope = BenchScope(f"bench-{tag}", "default", principal="user:bench", purpose_ref=PURPOSE, signer=signer)
    upsert_host(str(tmp / "hosts.json"), signer.host_id, public, [scope.tenant])
    settings = StorageSettings(grpc_host="127.0.0.1", grpc_port=0, mongo_url=mongo_url, mongo_db=f"bench_{tag}",
                               keyring=tmp / "keyring.json", dev_keyring=True, admin_token="bench-admin-token-000000",
                               relay_enabled=False, grpc_plaintext=True, host_registry=str(tmp / "hosts.json"),
                               audience=signer.audience)
    running, close, deps = await create(settings)
    chan = Transport.plaintext().channel(f"127.0.0.1:{running.port}", "storage")
    stub = storage_pb2_grpc.StorageServiceStub(chan)
    await deps.policies.enable(Scope(scope.tenant, scope.workspace), [], [])
    sem = asyncio.Semaphore(concurrency)
    samples: dict[str, list[float]] = {k: [] for k in ("capture", "admission", "get", "journal_page", "forget",
                                                       "sweep_500")}
    expiring = {"derivative_rule": "make-ineligible", "expires_at": format_instant(now_ms() + 3600 * 1000)}
    swept = [0]
    walls: dict[str, float] = {}
    by_index: list[float] = [0.0] * records
    candidates: list[str] = [""] * records
    record_ids: list[str] = []

    async def capture(i: int) -> None:
        async with sem:
            args = make_capture_args(idempotency_key=f"bench-{tag}-cap-{i:07d}",
                                     text=f"Decision {i}: keep the journal dense and the ledger exact ({tag}).",
                                     purpose_ref=PURPOSE, retention=expiring if i % 2 == 0 else None)
            start = time.perf_counter()
            reply = await stub.Capture(storage_pb2.CaptureRequest(
                caller=scope.caller, idempotency_key=args["idempotency_key"],
                operation_digest=operation_digest("engram_memory_capture", args),
                payload_json=canonicalize(args["payload"]), evidence_json=canonicalize(args["evidence"])))
            by_index[i] = (time.perf_counter() - start) * 1000
            candidates[i] = json.loads(reply.value_json)["candidate_id"]

    async def admit(i: int) -> None:
        async with sem:
            key = f"bench-{tag}-adm-{i:07d}"
            begin = storage_pb2.BeginAdmissionRequest(
                caller=scope.caller, candidate_id=candidates[i], idempotency_key=key,
                operation_digest=operation_digest("engram_memory_request_admission",
                                                  {"candidate_id": candidates[i], "idempotency_key": key}))

            async def flow() -> str:
                begun = await stub.BeginAdmission(begin)
                await stub.OpenCandidate(storage_pb2.OpenCandidateRequest(request_id=begun.request_id))
                done = await stub.CommitDecision(storage_pb2.CommitDecisionRequest(
                    request_id=begun.request_id, decision="accept", reason="policy", trust="asserted"))
                return str(json.loads(done.outcome_json)["record_id"])

            record_ids.append(await timed(samples["admission"], flow()))

    async def get(i: int) -> None:
        async with sem:
            await timed(samples["get"], stub.GetRecord(storage_pb2.GetRecordRequest(
                caller=scope.caller, record_id=record_ids[i % len(record_ids)])))

    async def journal_page(i: int) -> None:
        async with sem:
            await timed(samples["journal_page"], stub.ReadJournal(storage_pb2.ReadJournalRequest(
                scope=scope.search_caller.scope, after_cursor=str(i * 7 % max(1, records)), limit=1000)))

    async def forget(i: int) -> None:
        async with sem:
            key = f"bench-{tag}-fgt-{i:07d}"
            args = {"record_id": record_ids[i], "idempotency_key": key, "reason_ref": "reason:bench"}
            confirmation = signer.confirmation(scope, "engram_memory_forget", record_ids[i], args)
            await timed(samples["forget"], stub.Forget(storage_pb2.TransitionRequest(
                caller=scope.caller_with(confirmation), idempotency_key=key,
                operation_digest=operation_digest("engram_memory_forget", args), target=record_ids[i],
                reason_ref="reason:bench")))

    async def sweep(_: int) -> None:
        deps.clock = lambda: now_ms() + 2 * 3600 * 1000  # past every bench record's expiry
        while True:
            reply = await timed(samples["sweep_500"], stub.SweepExpired(storage_pb2.SweepExpiredRequest(limit=500)))
            swept[0] += reply.expired
            if not reply.more:
                return

    commands: dict[str, Counter[str]] = {}
    try:
        for name, job, count in (("capture", capture, records), ("admission", admit, records),
                                 ("get", get, records), ("journal_page", journal_page, max(10, records // 20)),
                                 ("forget", forget, max(10, records // 10)), ("sweep_500", sweep, 1)):
            start = time.perf_counter()
            await asyncio.gather(*(job(i) for i in range(count)))
            walls[name] = time.perf_counter() - start
            commands[name] = COMMANDS.take()
            commands[name]["_ops"] = count
        samples["capture"] = by_index
        tenth = max(1, records // 10)
        return {
            "records": records, "concurrency": concurrency, "samples": samples, "walls": walls,
            "capture_first_tenth_p50": percentiles(by_index[:tenth])["p50"],
            "capture_last_tenth_p50": percentiles(by_index[-tenth:])["p50"],
            "rss_mib": rss_mib(os.getpid()),
            "expired": swept[0],
            "commands": {k: dict(v) for k, v in commands.items()},
        }
    finally:
        await chan.close()
        await running.stop(0)
        await deps.store.client.drop_database(settings.mongo_db)
        await close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--mongo-url", default=os.environ.get("ENGRAM_BENCH_MONGO_URL"))
    parser.add_argument("--json", action="store_true", help="also print one JSON line with the figures")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        child = None if opts.mongo_url else datastores.start_secantus(Path(tmp) / "mongo")
        try:
            result = asyncio.run(run(opts.mongo_url or child.url, opts.records, opts.concurrency, Path(tmp)))
        finally:
            if child is not None:
                child.stop()
    print(f"# storage bench: {versions()}")
    print(f"# data: records={opts.records} concurrency={opts.concurrency} "
          f"server={'given URL' if opts.mongo_url else 'SecantusDB (own process)'}")
    for name, values in result["samples"].items():
        print(report(name, values, result["walls"][name]))
    print(f"capture p50 first tenth {result['capture_first_tenth_p50']:.2f}ms, "
          f"last tenth {result['capture_last_tenth_p50']:.2f}ms")
    for name, counts in result["commands"].items():
        ops = counts.pop("_ops")
        per = " ".join(f"{k}={v / ops:.1f}" for k, v in sorted(counts.items()))
        print(f"mongo commands per {name:<13} {sum(counts.values()) / ops:.1f}: {per}")
    print(f"expiry sweep: {result['expired']} records expired in {result['walls']['sweep_500']:.2f}s "
          f"({result['expired'] / max(result['walls']['sweep_500'], 1e-9):.0f}/s)")
    print(f"rss bench process (storage in-process) {result['rss_mib']:.1f} MiB")
    if opts.json:
        summary = {k: v for k, v in result.items() if k not in ("samples", "walls")}
        summary.update({f"{k}_ms": percentiles(v) for k, v in result["samples"].items()})
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
