"""Small queries over rendered manifests: workloads, pod specs, selectors, settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .rendering import Doc, Rendered

COMPONENT = "app.kubernetes.io/component"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")
# The engram processes, each one Deployment running `engram <component>`.
ENGRAM_COMPONENTS = ("gateway", "storage", "search", "admission", "worker", "beat")
# The ones without a Service: they serve only grpc.health.v1, to kubelet probes.
UNSERVICED_COMPONENTS = ("worker", "beat")
CONFIG_MAP = "engram-config"


def workloads(rendered: Rendered) -> list[Doc]:
    return [doc for doc in rendered.docs if doc["kind"] in WORKLOAD_KINDS]


def pod_spec(workload: Doc) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: Doc) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def component(workload: Doc) -> str:
    return pod_labels(workload)[COMPONENT]


def all_containers(workload: Doc) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def engram_deployments(rendered: Rendered) -> dict[str, Doc]:
    """The engram Deployments by component (those running the engram image)."""
    found = {component(d): d for d in rendered.of_kind("Deployment")}
    return {name: found[name] for name in ENGRAM_COMPONENTS if name in found}


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (an empty selector matches everything)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def find_named(rendered: Rendered, kind: str, name: str) -> Doc | None:
    """A resource by its kustomize name (generated ConfigMaps and Secrets carry a hash suffix)."""
    for doc in rendered.of_kind(kind):
        actual = doc["metadata"]["name"]
        if actual == name or actual.rsplit("-", 1)[0] == name:
            return doc
    return None


@dataclass(frozen=True)
class EnvSource:
    """Where one environment variable of a container comes from."""

    kind: str  # "config" (ConfigMap via envFrom), "value" (literal) or "secret"
    value: str | None = None
    secret: tuple[str, str] | None = None  # (Secret name, key)


def container_env(rendered: Rendered, container: dict[str, Any]) -> dict[str, EnvSource]:
    """Every variable a container receives, literal values and ConfigMap values resolved."""
    env: dict[str, EnvSource] = {}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        config = next(d for d in rendered.of_kind("ConfigMap") if d["metadata"]["name"] == ref)
        env.update({k: EnvSource("config", value=v) for k, v in config.get("data", {}).items()})
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = EnvSource("value", value=item["value"])
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = EnvSource("secret", secret=(ref["name"], ref["key"]))
    return env
