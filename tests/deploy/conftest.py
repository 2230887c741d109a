"""Session fixtures for the deploy checks: one copy of deploy/, rendered once per combination."""

from __future__ import annotations

from pathlib import Path

import pytest

from .rendering import COMBINATIONS, Rendered, ToolMissing, prepare, render_all


@pytest.fixture(scope="session")
def deploy_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("deploy")
    prepare(workdir)
    return workdir


@pytest.fixture(scope="session")
def rendered(deploy_workdir: Path) -> dict[str, Rendered]:
    """Every overlay and component combination, rendered by `kubectl kustomize`, by name."""
    try:
        return render_all(deploy_workdir)
    except ToolMissing as exc:
        pytest.fail(str(exc))


@pytest.fixture(params=[c.name for c in COMBINATIONS])
def manifests(request: pytest.FixtureRequest, rendered: dict[str, Rendered]) -> Rendered:
    """One rendered combination; a test using it runs once per overlay and combination."""
    result: Rendered = rendered[request.param]
    return result
