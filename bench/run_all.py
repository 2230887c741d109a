"""Run every benchmark with its default sizes and print their figures (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = (
    [sys.executable, str(HERE / "search_bench.py")],
    [sys.executable, str(HERE / "storage_bench.py")],
    [sys.executable, str(HERE / "plane_bench.py")],
    [sys.executable, str(HERE / "e2e_bench.py")],
    [sys.executable, str(HERE / "screening_bench.py")],
    [sys.executable, str(HERE / "admission_bench.py")],
    [sys.executable, str(HERE / "ingest_bench.py"), "--records", "1000", "--quiet"],
    [sys.executable, str(HERE / "edge_bench.py")],
    [sys.executable, str(HERE / "search_scale_bench.py"), "--sizes", "1000"],
    [sys.executable, str(HERE / "mcp_floor_bench.py")],
)


def main() -> int:
    failed = 0
    for command in BENCHES:
        print(f"$ {' '.join(Path(c).name for c in command)}", flush=True)
        failed |= subprocess.call(command, cwd=HERE.parent)
    return failed


if __name__ == "__main__":
    sys.exit(main())
