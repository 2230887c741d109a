"""Shared helpers of the benchmarks: percentiles, process memory, versions."""

from __future__ import annotations

import os
import platform
import statistics
from importlib import metadata
from pathlib import Path

PACKAGES = ("mcp", "grpcio", "protobuf", "pymongo", "celery", "redis", "secantusdb")


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    if not ordered:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    q = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 99
    return {"p50": q[49], "p95": q[94], "p99": q[98]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux /proc), seconds; 0 when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_mib(pid: int) -> float:
    """Resident memory of a process (Linux /proc), MiB; 0 when unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return f"python={platform.python_version()} " + " ".join(found)


def report(name: str, samples_ms: list[float], wall_seconds: float) -> str:
    p = percentiles(samples_ms)
    rate = len(samples_ms) / wall_seconds if wall_seconds > 0 else 0.0
    return (f"{name:<28} n={len(samples_ms):<6} p50={p['p50']:.2f}ms p95={p['p95']:.2f}ms "
            f"p99={p['p99']:.2f}ms throughput={rate:.1f}/s")
