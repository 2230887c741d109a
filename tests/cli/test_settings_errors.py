"""A process started with invalid settings says which variables are wrong and what to do, exits
78 (EX_CONFIG), and never prints a value (pydantic's own text would quote it: it may be a
secret). An admin call refused says its code and what to do about it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engram_cli.admin import HINTS, refusal_line
from engram_cli.main import CONFIG_EXIT

SECRET = "sk-live-NOT-A-PORT-0123456789abcdef"


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    return subprocess.run([sys.executable, "-m", "engram_cli.main", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("service, variable", [("gateway", "ENGRAM_GATEWAY_PORT"), ("storage", "ENGRAM_GRPC_PORT"),
                                                ("search", "ENGRAM_GRPC_PORT")])
def test_invalid_settings_name_the_variables_never_the_values(service: str, variable: str) -> None:
    done = run(service, **{variable: SECRET, "ENGRAM_ADMIN_TOKEN": SECRET + "x"})
    assert done.returncode == CONFIG_EXIT
    assert SECRET not in done.stderr and SECRET not in done.stdout
    assert "input_value" not in done.stderr and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"engram {service}: invalid configuration:"
    assert any(line.startswith(f"  {variable}: ") for line in lines)
    assert "Set these environment variables" in lines[-1]


def test_a_missing_required_setting_says_so() -> None:
    done = run("gateway")
    assert done.returncode == CONFIG_EXIT
    assert "  ENGRAM_AUDIENCE: required, not set" in done.stderr.splitlines()


def test_a_refused_admin_call_says_what_to_do() -> None:
    done = run("admin", "show", "--tenant", "t", "--workspace", "w",
               ENGRAM_STORAGE_ADDR="127.0.0.1:1", ENGRAM_ADMIN_TOKEN="x", ENGRAM_GRPC_PLAINTEXT="true")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == refusal_line("UNAVAILABLE")
    assert "engram up" in HINTS["UNAVAILABLE"]
