"""Internal-plane benchmark: what mutual TLS, the access check and storage's re-check of the
host's tokens cost per call.

    python bench/plane_bench.py [--calls 3000] [--concurrency 1 16] [--json]

1. One unary call (grpc.health.v1 Check: no work behind it, so the figure is the transport's)
   over a long-lived channel, through the shared server factory: plaintext (the plane before
   issue 10: no TLS, no access check) against mutual TLS with the access interceptor, at each
   concurrency. Client and server share this process and its event loop, as they would not in
   a deployment: the difference, not the absolute figure, is the point.
2. A new connection: channel creation + first call, plaintext against the TLS handshake (what
   a reconnect or a rotated certificate costs; connections are long-lived otherwise).
3. Storage's re-check, in-process: verifying a host context (Ed25519 signature and claims, as
   before every capture, withdraw, forget, get and admission). A confirmation costs the same
   again plus one MongoDB insert (its jti), on withdraw and forget only.

Prints p50/p95/p99, throughput, the added latency per call, versions and sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from bench.common import percentiles, report, versions  # noqa: E402
from engram_core.grpc_server import create_server  # noqa: E402
from engram_core.host_context import ContextVerifier  # noqa: E402
from engram_core.hosts import HostRegistry, upsert_host  # noqa: E402
from engram_core.pki import create_dev_pki  # noqa: E402
from engram_core.schemas.tools import TOOL_NAMES  # noqa: E402
from engram_core.settings import GrpcServiceSettings  # noqa: E402
from engram_core.transport import Transport  # noqa: E402
from engram_hostkit.keys import generate_host_keys  # noqa: E402
from engram_hostkit.tokens import mint_context  # noqa: E402


async def unary(server: Transport, client: Transport, calls: int, concurrency: int) -> tuple[list[float], float]:
    running = await create_server(GrpcServiceSettings(grpc_port=0), lambda s: None, server)
    samples: list[float] = []
    try:
        async with client.channel(f"127.0.0.1:{running.port}", "storage") as chan:
            stub = health_pb2_grpc.HealthStub(chan)
            request = health_pb2.HealthCheckRequest()
            for _ in range(50):  # connect and warm up
                await stub.Check(request, timeout=5)
            sem = asyncio.Semaphore(concurrency)

            async def one() -> None:
                async with sem:
                    start = time.perf_counter()
                    await stub.Check(request, timeout=5)
                    samples.append((time.perf_counter() - start) * 1000)

            start = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(calls)))
            wall = time.perf_counter() - start
    finally:
        await running.stop(0)
    return samples, wall


async def connections(server: Transport, client: Transport, count: int) -> list[float]:
    running = await create_server(GrpcServiceSettings(grpc_port=0), lambda s: None, server)
    samples = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            async with client.channel(f"127.0.0.1:{running.port}", "storage") as chan:
                await health_pb2_grpc.HealthStub(chan).Check(health_pb2.HealthCheckRequest(), timeout=5)
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        await running.stop(0)
    return samples


async def context_checks(tmp: Path, count: int) -> list[float]:
    private, public = generate_host_keys()
    upsert_host(str(tmp / "hosts.json"), "bench-host", public, ["acme"])
    verifier = ContextVerifier(HostRegistry.load(str(tmp / "hosts.json")), "bench", None, expiry_grace_seconds=5)
    tokens = [mint_context(private, host_id="bench-host", audience="bench", tenant="acme", workspace="default",
                           principal="user:bench", agent_id="agent:bench", session="s", purpose_ref="purpose:bench",
                           tools=TOOL_NAMES) for _ in range(count)]
    samples = []
    for token in tokens:
        start = time.perf_counter()
        await verifier.verify(token, None)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def run(opts: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="engram-plane-bench-"))
    create_dev_pki(tmp / "pki")
    plain, server, client = Transport.plaintext(), Transport(tmp / "pki" / "storage"), Transport(tmp / "pki" / "gateway")
    out: dict[str, Any] = {"calls": opts.calls, "unary": {}, "connect": {}}
    print(f"# plane bench: {opts.calls} health checks per run, loopback, one process; {versions()}")
    for concurrency in opts.concurrency:
        rows = {}
        for name, (srv, cli) in (("plaintext", (plain, plain)), ("mtls+access", (server, client))):
            samples, wall = await unary(srv, cli, opts.calls, concurrency)
            rows[name] = percentiles(samples) | {"throughput": len(samples) / wall}
            print(report(f"unary c={concurrency} {name}", samples, wall))
        added = rows["mtls+access"]["p50"] - rows["plaintext"]["p50"]
        print(f"  added by mTLS + access check at c={concurrency}: p50 {added * 1000:+.0f} µs "
              f"({rows['mtls+access']['p50'] / rows['plaintext']['p50']:.2f}×)")
        out["unary"][str(concurrency)] = rows
    for name, (srv, cli) in (("plaintext", (plain, plain)), ("mtls", (server, client))):
        samples = await connections(srv, cli, opts.connections)
        out["connect"][name] = percentiles(samples)
        print(report(f"new connection + call {name}", samples, sum(samples) / 1000))
    samples = await context_checks(tmp, opts.calls)
    out["context_check"] = percentiles(samples)
    print(report("storage context re-check", samples, sum(samples) / 1000))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--json", action="store_true", help="also print one JSON line with the figures")
    opts = parser.parse_args()
    out = asyncio.run(run(opts))
    if opts.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
