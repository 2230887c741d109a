"""Every overlay and component combination renders, and passes `kubernetes-validate --strict`
against the oldest Kubernetes minor these manifests support (1.30: the preStop `sleep` action
is on by default from there), a current one and the newest the pinned validator knows."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from .rendering import COMBINATIONS, Rendered, ToolMissing, tool

KUBERNETES_VERSIONS = ("1.30.0", "1.33.0", "1.37.0")


@pytest.fixture(scope="module")
def validations(rendered: dict[str, Rendered]) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """One validator run per Kubernetes version over every rendered file, all started at once."""
    try:
        validator = tool("kubernetes-validate")
    except ToolMissing as exc:
        pytest.fail(str(exc))
    files = [str(r.path) for r in rendered.values()]

    def run(version: str) -> subprocess.CompletedProcess[str]:
        command = [str(validator), "--strict", "--quiet", "-k", version, *files]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=len(KUBERNETES_VERSIONS)) as pool:
        yield {version: pool.submit(run, version) for version in KUBERNETES_VERSIONS}


def test_every_overlay_and_component_combination_renders(rendered: dict[str, Rendered]) -> None:
    assert sorted(rendered) == sorted(c.name for c in COMBINATIONS)
    for name, result in rendered.items():
        assert result.of_kind("Deployment"), name


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_manifests_pass_strict_schema_validation(
    validations: dict[str, Future[subprocess.CompletedProcess[str]]], version: str
) -> None:
    result = validations[version].result()
    # --quiet prints only failures and warnings; a warning means a kind without a schema.
    assert (result.returncode, result.stdout.strip(), result.stderr.strip()) == (0, "", "")
