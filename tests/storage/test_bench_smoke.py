"""The storage benchmark runs end to end on a tiny data set and prints its figures."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_storage_bench_runs_small(mongo_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "storage_bench.py"), "--records", "20", "--concurrency", "2",
         "--mongo-url", mongo_url, "--json"],
        check=True, capture_output=True, text=True, timeout=180,
    )
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("# storage bench: python=")
    summary = json.loads(lines[-1])
    assert summary["records"] == 20
    for name in ("capture", "admission", "get", "journal_page", "forget"):
        assert summary[f"{name}_ms"]["p50"] > 0
    assert summary["rss_mib"] > 0
