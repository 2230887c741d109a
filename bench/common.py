"""Shared helpers of the benchmarks: percentiles, process memory, versions, extra scopes and
the gRPC write path (capture + admission), and the retrieval-quality metrics."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

BENCH_PURPOSE = "purpose:bench"
BENCH_PRINCIPAL = "user:bench"

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


def versions(extra: Sequence[str] = ()) -> str:
    """Python and the stack's package versions (a missing one left out), then ``extra``
    packages a bench needs (a missing one printed as ``absent``)."""
    found = []
    for name in (*PACKAGES, *extra):
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            if name in extra:
                found.append(f"{name}=absent")
    return f"python={platform.python_version()} " + " ".join(found)


REFERENCE_ADDITIONS = 1_000_000


def reference_loop_seconds(repeats: int = 3) -> float:
    """The best of ``repeats`` timings of a plain Python loop of :data:`REFERENCE_ADDITIONS`
    additions: a speed reference printed beside a bench's figures, since machines of the same
    kind differ by up to 2x from day to day (lower is faster)."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(REFERENCE_ADDITIONS):
            total += i
        best = min(best, time.perf_counter() - start)
    return best


def machine() -> str:
    """Cores, CPU model, the reference loop and the load average, for a bench's header."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"cores={os.cpu_count()} cpu={model!r} reference_loop={reference_loop_seconds() * 1000:.0f}ms"
            f" ({REFERENCE_ADDITIONS:,} Python additions; lower is faster) load1={load:.2f}")


def report(name: str, samples_ms: list[float], wall_seconds: float) -> str:
    p = percentiles(samples_ms)
    rate = len(samples_ms) / wall_seconds if wall_seconds > 0 else 0.0
    return (f"{name:<28} n={len(samples_ms):<6} p50={p['p50']:.2f}ms p95={p['p95']:.2f}ms "
            f"p99={p['p99']:.2f}ms throughput={rate:.1f}/s")


@dataclass(frozen=True)
class HostSigner:
    """A host's signing key: a bench calling the services directly, as the gateway forwards a
    call, carries a host-signed context in each Caller (storage verifies it)."""

    host_id: str
    private_key: str
    audience: str

    @classmethod
    def of_stack(cls, stack: Any) -> "HostSigner":
        from engram_hostkit.hostfile import HostFile

        host = HostFile.load(str(stack.host_file))
        return cls(host.host_id, host.private_key, host.audience)

    def context(self, scope: "Scope") -> str:
        from engram_core.schemas.tools import TOOL_NAMES
        from engram_hostkit.tokens import mint_context

        return mint_context(self.private_key, host_id=self.host_id, audience=self.audience, tenant=scope.tenant,
                            workspace=scope.workspace, principal=scope.principal, agent_id="agent:bench",
                            session="bench", audit_id="bench", purpose_ref=scope.purpose_ref, tools=TOOL_NAMES)

    def confirmation(self, scope: "Scope", tool: str, target: str, arguments: dict[str, Any]) -> str:
        from engram_hostkit.tokens import mint_confirmation

        return mint_confirmation(self.private_key, host_id=self.host_id, audience=self.audience,
                                 tenant=scope.tenant, workspace=scope.workspace, principal=scope.principal,
                                 tool=tool, target=target, arguments=arguments, approver="human:bench")


class Scope:
    """One ``{tenant, workspace}`` a bench writes to and searches, with its gRPC caller
    (``records`` counts what the bench loaded into it)."""

    def __init__(self, tenant: str, workspace: str, *, principal: str = BENCH_PRINCIPAL,
                 purpose_ref: str = BENCH_PURPOSE, signer: HostSigner | None = None) -> None:
        self.tenant, self.workspace = tenant, workspace
        self.principal, self.purpose_ref = principal, purpose_ref
        self.signer = signer
        self.records = 0

    @property
    def caller(self) -> Any:
        """The Caller of one call: with a fresh host-signed context when the scope has a signer
        (every agent-facing storage call needs one; the search service reads none)."""
        return self.caller_with()

    @property
    def search_caller(self) -> Any:
        """The Caller of a search (the search service verifies no host token: none is minted)."""
        return self.caller_with(signed=False)

    def caller_with(self, confirmation: str = "", *, signed: bool = True) -> Any:
        from engram_api.common.v1 import common_pb2  # deferred: keep this module light to import

        signed = signed and self.signer is not None
        return common_pb2.Caller(
            scope=common_pb2.Scope(tenant=self.tenant, workspace=self.workspace), principal=self.principal,
            agent_id="agent:bench" if signed else "", session="bench" if signed else "",
            audit_id="bench" if signed else "", purpose_ref=self.purpose_ref,
            context_token=self.signer.context(self) if signed and self.signer is not None else "",
            confirmation_token=confirmation)

    def enable(self, stack: Any) -> "Scope":
        """Enable memory for the scope on a spawned stack (the operator's ``engram admin enable``,
        which also lets the dev host act for its tenant); calls then act as the dev host."""
        stack.admin("enable", "--tenant", self.tenant, "--workspace", self.workspace)
        self.signer = HostSigner.of_stack(stack)
        return self


async def capture_and_admit(storage: Any, admission: Any, scope: Scope, args: dict[str, Any],
                            admission_key: str) -> dict[str, Any]:
    """The real write path over gRPC: StorageService.Capture of ``args`` (the capture tool's
    arguments), then AdmissionService.RequestAdmission, which waits for the worker's decision.
    Returns the admission ``outcome`` (``status``, ``record_id`` when accepted, ...)."""
    from engram_api.admission.v1 import admission_pb2
    from engram_api.storage.v1 import storage_pb2
    from engram_core.canonical import canonicalize
    from engram_core.digests import operation_digest

    captured = await storage.Capture(storage_pb2.CaptureRequest(
        caller=scope.caller, idempotency_key=args["idempotency_key"],
        operation_digest=operation_digest("engram_memory_capture", args),
        payload_json=canonicalize(args["payload"]), evidence_json=canonicalize(args["evidence"])), timeout=60)
    candidate = json.loads(captured.value_json)["candidate_id"]
    admitted = await admission.RequestAdmission(admission_pb2.RequestAdmissionRequest(
        caller=scope.caller, candidate_id=candidate, idempotency_key=admission_key,
        operation_digest=operation_digest("engram_memory_request_admission",
                                          {"candidate_id": candidate, "idempotency_key": admission_key})), timeout=120)
    outcome: dict[str, Any] = json.loads(admitted.value_json)["outcome"]
    return outcome


# Retrieval-quality metrics (binary relevance). ``ranking`` is a ranked list of document ids,
# best first; ``relevant`` the query's set of relevant ids (not empty). A repeated id is
# dropped from the ranking (the documents behind it move up) before the cut at k.

def _first_positions(ranking: Sequence[str], k: int | None = None) -> list[str]:
    seen: set[str] = set()
    out = []
    for doc in ranking:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out if k is None else out[:k]


def recall_at_k(ranking: Sequence[str], relevant: Collection[str], k: int) -> float:
    """|top-k ∩ relevant| / |relevant|."""
    if not relevant:
        raise ValueError("a query without relevant documents has no recall")
    return sum(1 for doc in _first_positions(ranking, k) if doc in relevant) / len(relevant)


def ndcg_at_k(ranking: Sequence[str], relevant: Collection[str], k: int) -> float:
    """DCG@k / ideal DCG@k with gain 1 for a relevant document at rank i (1-based) discounted
    by log2(i + 1); the ideal ranking puts min(k, |relevant|) relevant documents first."""
    if not relevant:
        raise ValueError("a query without relevant documents has no nDCG")
    dcg = sum(1 / math.log2(i + 2) for i, doc in enumerate(_first_positions(ranking, k)) if doc in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal


def mrr(ranking: Sequence[str], relevant: Collection[str]) -> float:
    """Reciprocal rank of the first relevant document in the whole ranking; 0 without one
    (the mean over queries is the MRR)."""
    if not relevant:
        raise ValueError("a query without relevant documents has no reciprocal rank")
    for i, doc in enumerate(_first_positions(ranking)):
        if doc in relevant:
            return 1 / (i + 1)
    return 0.0
