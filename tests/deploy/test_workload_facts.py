"""Policy facts on the rendered workloads of every overlay and component combination: hardened
pods, resources, probes, graceful stop, disruption budgets, spread, Services and the HPA."""

from __future__ import annotations

from typing import Any

from admission_worker.beat import BeatSettings
from engram_core.grpc_server import LIVENESS_SERVICE

from .manifests import (
    CONFIG_MAP,
    ENGRAM_COMPONENTS,
    UNSERVICED_COMPONENTS,
    all_containers,
    component,
    container_env,
    engram_deployments,
    find_named,
    pod_labels,
    pod_spec,
    selector_matches,
    workloads,
)
from .rendering import Rendered

# The gRPC port of each engram process (the worker's and beat's serve only grpc.health.v1).
GRPC_PORTS = {"storage": 50051, "search": 50052, "admission": 50053, "worker": 50054, "beat": 50055}
# The plaintext grpc.health.v1-only port kubelet probes use (they cannot present a certificate).
PROBE_PORT = 50060
GATEWAY_PORT = 8080
SERVICE_PORT_NAMES = {"gateway": "http", "storage": "grpc", "search": "grpc", "admission": "grpc"}
APP_USER = 10001  # the Dockerfile's USER


def _where(workload: dict[str, Any], container: dict[str, Any] | None = None) -> str:
    name = f"{workload['kind']}/{workload['metadata']['name']}"
    return f"{name} container {container['name']}" if container else name


def test_every_container_has_cpu_and_memory_requests_and_limits(manifests: Rendered) -> None:
    for workload in workloads(manifests):
        for container in all_containers(workload):
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                assert set(resources.get(bound, {})) >= {"cpu", "memory"}, _where(workload, container)


def test_every_pod_and_container_is_hardened(manifests: Rendered) -> None:
    for workload in workloads(manifests):
        spec = pod_spec(workload)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, _where(workload)
        assert pod["runAsUser"] != 0, _where(workload)
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, _where(workload)
        assert spec["automountServiceAccountToken"] is False, _where(workload)
        assert spec.get("serviceAccountName"), _where(workload)
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), _where(workload)
        for container in all_containers(workload):
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True, _where(workload, container)
            assert sc["allowPrivilegeEscalation"] is False, _where(workload, container)
            assert sc["readOnlyRootFilesystem"] is True, _where(workload, container)
            assert sc["capabilities"] == {"drop": ["ALL"]}, _where(workload, container)
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, _where(workload, container)
            assert "privileged" not in sc, _where(workload, container)


def test_every_service_account_a_pod_uses_exists(manifests: Rendered) -> None:
    accounts = {d["metadata"]["name"] for d in manifests.of_kind("ServiceAccount")}
    for workload in workloads(manifests):
        assert pod_spec(workload)["serviceAccountName"] in accounts, _where(workload)


def test_every_long_running_container_has_readiness_and_liveness_probes(manifests: Rendered) -> None:
    for workload in workloads(manifests):
        if workload["kind"] == "Job":
            continue
        for container in pod_spec(workload)["containers"]:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert probe in container, f"{_where(workload, container)}: {probe}"


def test_grpc_services_use_native_grpc_probes_on_their_probe_port(manifests: Rendered) -> None:
    for name, deployment in engram_deployments(manifests).items():
        if name == "gateway":
            continue
        (container,) = pod_spec(deployment)["containers"]
        port = GRPC_PORTS[name]
        assert container["ports"] == [{"name": "grpc", "containerPort": port, "protocol": "TCP"},
                                      {"name": "probe", "containerPort": PROBE_PORT, "protocol": "TCP"}]
        env = container_env(manifests, container)
        assert env["ENGRAM_GRPC_PORT"].value == str(port) and env["ENGRAM_PROBE_PORT"].value == str(PROBE_PORT)
        for probe in ("startupProbe", "readinessProbe"):
            assert container[probe]["grpc"] == {"port": PROBE_PORT}, f"{name} {probe}"
        # Liveness asks the service that stays SERVING through a dependency's outage (readiness
        # does not), so an outage of Redis or MongoDB never restarts the pods.
        assert container["livenessProbe"]["grpc"] == {"port": PROBE_PORT, "service": LIVENESS_SERVICE}, name


def test_gateway_probes_are_http_readyz_and_healthz(manifests: Rendered) -> None:
    (container,) = pod_spec(engram_deployments(manifests)["gateway"])["containers"]
    assert container["ports"] == [{"name": "http", "containerPort": GATEWAY_PORT, "protocol": "TCP"}]
    assert container_env(manifests, container)["ENGRAM_GATEWAY_PORT"].value == str(GATEWAY_PORT)
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_engram_deployments_run_the_engram_image_with_their_service_argument(manifests: Rendered) -> None:
    deployments = engram_deployments(manifests)
    assert sorted(deployments) == sorted(ENGRAM_COMPONENTS)
    for name, deployment in deployments.items():
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        assert container["args"] == [name] and "command" not in container, name
        assert container["image"].split("/")[-1].split(":")[0] == "engram-memory", name
        assert spec["securityContext"]["runAsUser"] == APP_USER, name
        # Service links would inject ENGRAM_STORAGE_PORT=tcp://… into the settings prefix.
        assert spec["enableServiceLinks"] is False, name


def test_beat_is_one_replica_that_never_overlaps_itself(manifests: Rendered) -> None:
    """Every beat schedules every task: exactly one, and a rollout stops it before the next."""
    beat = engram_deployments(manifests)["beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = pod_spec(beat)["containers"]
    assert container["args"] == ["beat"]
    # Its budget never blocks a drain (one replica: it is evicted and starts elsewhere).
    (budget,) = [b for b in manifests.of_kind("PodDisruptionBudget")
                 if selector_matches(b["spec"]["selector"], pod_labels(beat))]
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # The sweep interval it is given is one its settings class accepts (1..86400 s).
    interval = container_env(manifests, container)["ENGRAM_EXPIRY_SWEEP_SECONDS"]
    assert interval.kind == "value" and interval.value is not None
    BeatSettings.model_validate({"expiry_sweep_seconds": interval.value})


def test_every_image_is_pinned_to_a_tag_or_digest(manifests: Rendered) -> None:
    for workload in workloads(manifests):
        for container in all_containers(workload):
            image: str = container["image"]
            reference = image.rsplit("/", 1)[-1]
            assert ("@sha256:" in image or ":" in reference) and not image.endswith(":latest"), image


def test_termination_grace_exceeds_prestop_plus_the_apps_stop_grace(manifests: Rendered) -> None:
    for name, deployment in engram_deployments(manifests).items():
        spec = pod_spec(deployment)
        (container,) = spec["containers"]
        stop_grace = float(container_env(manifests, container)["ENGRAM_STOP_GRACE_SECONDS"].value or "nan")
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        assert spec["terminationGracePeriodSeconds"] > pre_stop + stop_grace, name
        # Endpoints must drop a Service-backed pod before it stops serving.
        if name not in UNSERVICED_COMPONENTS:
            assert pre_stop > 0, name


def test_every_deployment_and_statefulset_has_exactly_one_pdb_selecting_it(manifests: Rendered) -> None:
    budgets = manifests.of_kind("PodDisruptionBudget")
    for workload in manifests.of_kind("Deployment") + manifests.of_kind("StatefulSet"):
        if workload["kind"] == "StatefulSet" and workload["spec"].get("replicas", 2) == 1:
            continue  # a single-replica store (Redis): a PDB would block drains or do nothing
        matching = [b for b in budgets if selector_matches(b["spec"]["selector"], pod_labels(workload))]
        assert len(matching) == 1, _where(workload)
        assert matching[0]["spec"].get("maxUnavailable") == 1, _where(workload)
    for budget in budgets:
        selected = [w for w in workloads(manifests) if selector_matches(budget["spec"]["selector"], pod_labels(w))]
        assert len(selected) == 1, budget["metadata"]["name"]


def test_deployments_spread_over_zones_and_nodes(manifests: Rendered) -> None:
    for deployment in manifests.of_kind("Deployment"):
        constraints = pod_spec(deployment)["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in constraints} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        for constraint in constraints:
            assert selector_matches(constraint["labelSelector"], pod_labels(deployment)), _where(deployment)
            assert constraint["matchLabelKeys"] == ["pod-template-hash"], _where(deployment)


def test_services_select_one_component_on_a_named_port(manifests: Rendered) -> None:
    deployments = engram_deployments(manifests)
    services = {s["metadata"]["name"]: s for s in manifests.of_kind("Service")}
    for name, deployment in deployments.items():
        service = services.get(f"engram-{name}")
        if name in UNSERVICED_COMPONENTS:
            assert service is None, name
            continue
        assert service is not None, name
        assert selector_matches({"matchLabels": service["spec"]["selector"]}, pod_labels(deployment))
        (port,) = service["spec"]["ports"]
        port_name = SERVICE_PORT_NAMES[name]
        assert (port["name"], port["targetPort"]) == (port_name, port_name)
        assert port["port"] == GRPC_PORTS.get(name, GATEWAY_PORT)
    for service in services.values():
        selector = {"matchLabels": service["spec"]["selector"]}
        selected = [w for w in workloads(manifests) if selector_matches(selector, pod_labels(w))]
        assert len(selected) == 1, service["metadata"]["name"]


def test_callers_address_the_services_on_their_ports(manifests: Rendered) -> None:
    config = find_named(manifests, "ConfigMap", CONFIG_MAP)
    assert config is not None
    for callee in ("storage", "admission"):
        assert config["data"][f"ENGRAM_{callee.upper()}_ADDR"] == f"engram-{callee}:{GRPC_PORTS[callee]}"
    # Search: every replica through the headless Service (per-call round robin; the worker
    # invalidates each one).
    port = GRPC_PORTS["search"]
    assert config["data"]["ENGRAM_SEARCH_ADDR"] == f"dns:///engram-search-replicas:{port}"
    assert config["data"]["ENGRAM_SEARCH_REPLICAS"] == f"engram-search-replicas:{port}"
    headless = find_named(manifests, "Service", "engram-search-replicas")
    assert headless is not None and headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is False
    assert headless["spec"]["selector"] == find_named(manifests, "Service", "engram-search")["spec"]["selector"]


def test_the_gateway_is_scaled_by_its_hpa_alone(manifests: Rendered) -> None:
    gateway = engram_deployments(manifests)["gateway"]
    assert "replicas" not in gateway["spec"]
    (hpa,) = manifests.of_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "engram-gateway"}
    assert 2 <= hpa["spec"]["minReplicas"] or manifests.combination.overlay == "dev"
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]


def test_each_workload_has_its_own_component_label_and_selects_its_pods(manifests: Rendered) -> None:
    names = [component(w) for w in workloads(manifests)]
    assert len(names) == len(set(names)), names
    for workload in workloads(manifests):
        assert pod_labels(workload)["app.kubernetes.io/part-of"] == "engram", _where(workload)
        if workload["kind"] != "Job":
            assert selector_matches(workload["spec"]["selector"], pod_labels(workload)), _where(workload)


_BINARY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(quantity: str) -> int:
    for suffix, factor in _BINARY_UNITS.items():
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)


def test_the_search_projection_budget_leaves_headroom_under_the_memory_limit(manifests: Rendered) -> None:
    search = engram_deployments(manifests)["search"]
    (container,) = pod_spec(search)["containers"]
    source = container_env(manifests, container)["ENGRAM_PROJECTION_BUDGET_BYTES"]
    assert source.kind == "value" and source.value is not None
    budget = int(source.value)
    limit = _bytes(container["resources"]["limits"]["memory"])
    # The budget is an estimate of the projections alone: the process needs room beyond it,
    # the embedding model's resident memory included (measured: ~160 MiB once loaded).
    assert budget + 160 * 2**20 <= limit * 0.7, (budget, limit)
    threads = container_env(manifests, container)["ENGRAM_EMBEDDING_THREADS"]
    assert threads.value is not None and int(threads.value) <= _cpus(container["resources"]["limits"]["cpu"])


def _cpus(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)
