"""The README's host example runs as written against a running stack (docs stay true)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT
from tests.e2e.conftest import RunningStack


def test_readme_host_example_runs(stack: RunningStack) -> None:
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S)
    assert example is not None
    code = example.group(1).replace('".engram/host.json"', repr(str(stack.host_file)))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "tombstoned"
    assert lines[-2].startswith("['mem_")
