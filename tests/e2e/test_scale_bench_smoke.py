"""bench/search_scale_bench.py runs end to end on tiny sizes (its own stack, the real write
path, MCP and gRPC searches, several scopes, the cold rebuild) and prints every section."""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "search_scale_bench.py"
FIGURE = re.compile(r"^(mcp search c=1|mcp search c=4|grpc search c=1) +n=(\d+) +p50=([\d.]+)ms", re.M)


def test_scale_bench_runs_small() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", "30", "--scopes", "2", "--scope-records", "20", "--queries", "12",
         "--load-concurrency", "8"],
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout
    assert "## one scope, 30 records" in out
    assert "## 2 more scopes of 20 records, searched round robin" in out
    assert re.search(r"^first search \(builds\) +n=2 ", out, re.M)
    figures = FIGURE.findall(out)
    # Once for the main scope, once across the extra scopes; every sample counted.
    assert [name for name, _, _ in figures] == ["mcp search c=1", "mcp search c=4", "grpc search c=1"] * 2
    assert all(int(n) == 12 and float(p50) > 0 for _, n, p50 in figures)
    assert "search RSS" in out and "for 70 records" in out
    # Where a loaded record's and a search's time goes: each process's CPU, largest first.
    for label in ("cpu per loaded record", "cpu per mcp search c=1"):
        found = re.search(rf"^{label} \(ms\): ((?:\w+=[\d.]+ ?)+)$", out, re.M)
        assert found, label
        shares = [float(part.split("=")[1]) for part in found.group(1).split()]
        assert shares == sorted(shares, reverse=True) and {"storage", "search"} & {
            part.split("=")[0] for part in found.group(1).split()}
    assert re.search(r"^## cold rebuild of the 30-record scope after a search restart: [\d.]+ s", out, re.M)


def test_scale_bench_profiles_searches_and_the_rebuild(tmp_path: Path) -> None:
    """``--profile``: py-spy samples gateway, search and storage during MCP searches, and
    search, storage and the MongoDB-protocol server during the cold rebuild; ``--profile-load``
    every process of the stack while the records load."""
    out = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", "20", "--queries", "5", "--load-concurrency", "8",
         "--profile", str(tmp_path), "--profile-seconds", "3", "--profile-load", str(tmp_path / "load")],
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout
    assert re.search(r"^## profile: \d+ MCP searches in 3 s", out, re.M)
    for name in ("client", "gateway", "search", "storage"):
        assert re.search(rf"^# {name}: busy samples \d+", out, re.M)
        assert (tmp_path / "20" / f"{name}.txt").exists()
    loading = out[out.index("## load profile to 20 records"):out.index("## one scope, 20 records")]
    for name in ("storage", "worker", "mongodb", "admission", "client"):
        assert re.search(rf"^# {name}: busy samples [1-9]\d*", loading, re.M), name
        assert (tmp_path / "load" / "20" / f"{name}.txt").stat().st_size > 0
    rebuild = out[out.index("## cold rebuild"):]
    for name in ("search", "storage", "mongodb"):
        assert re.search(rf"^# {name}: busy samples [1-9]\d*", rebuild, re.M), name
        assert (tmp_path / "rebuild" / f"{name}.txt").stat().st_size > 0


def test_mcp_floor_bench_runs_small() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH.with_name("mcp_floor_bench.py")), "--calls", "10"],
        check=True, capture_output=True, text=True, timeout=300,
    ).stdout
    names = re.findall(r"^(echo c=1|echo c=4|structured c=1|structured c=4) +n=10 +p50=[\d.]+ms", out, re.M)
    assert names == ["echo c=1", "echo c=4", "structured c=1", "structured c=4"]
    assert "# server RSS" in out and "mcp=" in out
    assert re.search(r"^# machine: cores=\d+ cpu='.*' reference_loop=\d+ms .* load1=[\d.]+$", out, re.M)


def test_scale_bench_keeps_its_stack_and_tops_it_up(tmp_path: Path) -> None:
    """``--state-dir``: the stack's databases outlive the run; the next run on the same folder
    measures what is held and loads only what the main scope lacks for each size."""
    def run(sizes: str) -> str:
        return subprocess.run(
            [sys.executable, str(BENCH), "--sizes", sizes, "--queries", "5", "--load-concurrency", "8",
             "--state-dir", str(tmp_path / "stack")],
            check=True, capture_output=True, text=True, timeout=600,
        ).stdout

    first = run("20")
    assert re.search(r"^## one scope, 20 records \(load [\d.]+ records/s", first, re.M)
    second = run("20,30")
    assert f"## one scope, 20 records (held in {tmp_path / 'stack'} from an earlier run)" in second
    assert re.search(r"^## one scope, 30 records \(load [\d.]+ records/s", second, re.M)
    assert "cpu per loaded record" in second  # only for the size that loaded
    assert re.search(r"^## cold rebuild of the 30-record scope", second, re.M)
    assert (tmp_path / "stack" / "bench-loaded.json").read_text() == '{"main_scope_records": 30}'
