"""The HTTP edge benchmark runs end to end on a few clients and prints its figures: GET
refused, slowloris sockets closed on the header deadline, a trickled body answered 408."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_edge_bench_runs_small() -> None:
    env = {**os.environ, "ENGRAM_HTTP_HEADER_SECONDS": "1", "ENGRAM_HTTP_BODY_SECONDS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "edge_bench.py"), "--connections", "20", "--seconds", "3"],
                          check=True, capture_output=True, text=True, timeout=240, env=env)
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("# edge bench: python=")
    assert any("answers={'HTTP/1.1 405 Method Not Allowed': 20}" in line for line in lines), lines
    slow = [line for line in lines if line.startswith("slowloris n=20 t=")]
    assert len(slow) == 3 and slow[-1].split()[3] == "open=0", slow
    assert "408 Request Timeout" in lines[-1], lines
