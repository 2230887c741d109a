"""Never-store screening: recall and false positives per corpus kind, cost per KiB, decisions/s.

Runs in-process (screening is CPU-bound and runs inside the worker's task): the labelled corpus
of ``tests/admission/secret_corpus.py`` scored per kind, the screening cost of prose, config and
the adversarial inputs of the ReDoS guard at 64 KiB (the largest string a capture holds), and
``decide`` (screening + rules) per second on one thread for corpus-sized captures.

    .venv/bin/python bench/screening_bench.py [--draws 3] [--markdown]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from admission_worker.decide import decide  # noqa: E402
from admission_worker.screening import DETECTOR_NAMES, MAX_FIELD_BYTES, screen  # noqa: E402
from bench.common import percentiles, versions  # noqa: E402
from engram_core.policy import ScopePolicy  # noqa: E402
from tests.admission.secret_corpus import placed, samples, score  # noqa: E402
from tests.admission.test_screening_corpus import ADVERSARIAL  # noqa: E402


def corpus_table(draws: int, markdown: bool) -> None:
    rows = score(screen, draws=draws)
    for secret, title, measure in ((True, "positive kinds", "recall"), (False, "benign look-alikes", "false-positive rate")):
        chosen = [r for r in rows if r.secret is secret]
        total, flagged = sum(r.total for r in chosen), sum(r.flagged for r in chosen)
        print(f"\n{title}: {len(chosen)} kinds, {total} samples, {measure} {flagged / total:.3f}")
        if markdown:
            print(f"\n| kind | samples | flagged | {measure} |\n|---|---|---|---|")
        for r in chosen:
            line = (f"| {r.kind} | {r.total} | {r.flagged} | {r.rate:.2f} |" if markdown
                    else f"  {r.kind:<26} {r.flagged:>3}/{r.total:<3} {measure}={r.rate:.2f}")
            print(line)


def _prose(rng: random.Random, size: int) -> str:
    words = ("the storage service batches journal writes in groups of sixty four decision ada prefers short "
             "status updates on fridays release pinned grpc and protobuf together latency stayed low").split()
    return " ".join(rng.choice(words) for _ in range(size // 4))[:size]


def _config(rng: random.Random, size: int) -> str:
    lines = []
    while sum(len(line) + 1 for line in lines) < size:
        lines.append(f"service_{rng.randint(0, 999)}:\n  replicas: {rng.randint(1, 9)}\n  image: registry.example.com/app:{rng.randint(1, 99)}\n  log_level: info")
    return "\n".join(lines)[:size]


def cost_per_kib(repeat: int) -> None:
    rng = random.Random(7)
    size = MAX_FIELD_BYTES - 1
    inputs = {"prose": _prose(rng, size), "config (yaml)": _config(rng, size)}
    inputs.update({f"adversarial {unit!r}": (unit * (size // len(unit) + 1))[:size] for unit in ADVERSARIAL})
    print(f"\nscreening cost of one {size}-byte string (median of {repeat}; worst first after the first two):")
    results = []
    for name, text in inputs.items():
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            screen({"t": text}, budget_seconds=60)
            times.append(time.perf_counter() - started)
        median = sorted(times)[len(times) // 2]
        results.append((name, median))
    ordered = results[:2] + sorted(results[2:], key=lambda r: -r[1])
    for name, median in ordered:
        print(f"  {name:<36} {median * 1000:8.1f} ms   {median * 1000 / (size / 1024):.2f} ms/KiB")


def decisions_per_second(seconds: float) -> None:
    captures = [placed(s) for s in samples()]
    policy = ScopePolicy()
    latencies: list[float] = []
    started = time.perf_counter()
    n = 0
    while time.perf_counter() - started < seconds:
        payload, evidence = captures[n % len(captures)]
        t0 = time.perf_counter()
        decide(payload, evidence, policy, duplicate_of_record_id="", matches_forgotten=False)
        latencies.append((time.perf_counter() - t0) * 1000)
        n += 1
    wall = time.perf_counter() - started
    p = percentiles(latencies)
    print(f"\ndecide() in-process, one thread, corpus captures (~{sum(len(str(c)) for c in captures) // len(captures)} B):"
          f" n={n} p50={p['p50']:.2f}ms p95={p['p95']:.2f}ms p99={p['p99']:.2f}ms throughput={n / wall:.0f}/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=3, help="corpus draws to score (6 samples per kind each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to run decide()")
    parser.add_argument("--markdown", action="store_true", help="print the corpus table as markdown")
    args = parser.parse_args()
    print(f"screening bench: {versions(('detect-secrets',))}; {len(DETECTOR_NAMES)} detectors; corpus "
          f"{len(samples())} samples per draw x {args.draws} draws")
    corpus_table(args.draws, args.markdown)
    cost_per_kib(args.repeat)
    decisions_per_second(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
