import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "search_bench.py"


def test_bench_runs_small():
    out = subprocess.run(
        [sys.executable, str(BENCH), "--n", "200", "--queries", "20", "--json", "--tracemalloc"],
        check=True, capture_output=True, text=True, timeout=120,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["n"] == 200 and result["queries"] == 20
    assert result["page_ms"]["p50"] > 0 and result["qps"] > 0
    assert result["traced_mb"] > 0
