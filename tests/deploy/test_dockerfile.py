"""Facts about the image, checked offline by parsing the Dockerfile and .dockerignore (no Docker
engine here): multi-stage, pinned base, no build tools or installs in the final stage, numeric
non-root user matching the manifests, the engram CLI as entrypoint, an allow-list context."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field

import pytest

from engram_cli.main import COMMANDS

from .manifests import ENGRAM_COMPONENTS
from .rendering import ROOT

PINNED_BASE = re.compile(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?")
APP_USER = "10001:10001"  # the manifests' runAsUser/runAsGroup
INSTALLERS = re.compile(r"\b(apt-get|apt|apk|dnf|yum|gcc|cc|make|pip install|uv pip)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        logical.append(current.strip())
        current = ""
    return [(keyword.upper(), args.strip()) for keyword, _, args in (line.partition(" ") for line in logical)]


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    instructions = _instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))
    build_args = dict(a.split("=", 1) for kw, a in instructions if kw == "ARG" and "=" in a)
    result: list[Stage] = []
    for keyword, args in instructions:
        if keyword == "FROM":
            words = args.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: build_args[m.group(1)], words[0])
            result.append(Stage(base, words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        elif result:
            result[-1].instructions.append((keyword, args))
    return result


def test_the_image_is_multi_stage_on_a_pinned_slim_base(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    for stage in stages:
        assert PINNED_BASE.fullmatch(stage.base), stage.base


def test_the_final_stage_installs_nothing_and_copies_the_built_environment(stages: list[Stage]) -> None:
    final = stages[-1]
    for command in final.all("RUN"):
        assert not INSTALLERS.search(command), command
    copies = final.all("COPY")
    builders = {s.name for s in stages[:-1]}
    assert copies
    for copy in copies:
        source = re.match(r"--from=(\S+) ", copy)
        assert source is not None and source[1] in builders, copy


def test_the_final_stage_runs_as_the_numeric_unprivileged_user(stages: list[Stage]) -> None:
    assert stages[-1].all("USER") == [APP_USER]


def test_the_entrypoint_is_the_engram_cli_with_a_service_per_deployment(stages: list[Stage]) -> None:
    assert json.loads(stages[-1].all("ENTRYPOINT")[-1]) == ["engram"]
    assert set(ENGRAM_COMPONENTS) <= set(COMMANDS)


def test_dockerignore_admits_exactly_pyproject_and_the_python_packages() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "*"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert admitted == {"pyproject.toml"} | packages
