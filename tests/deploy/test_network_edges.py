"""The rendered NetworkPolicies allow exactly the documented edges, no more and no fewer.

The edge table below is the one source of truth; docs/operations.md ("Network edges") must
list the same edges. Every combination with the network-policies component is checked by
evaluating its policies for every pair of endpoints on every port of interest.
"""

from __future__ import annotations

import re

import pytest

from .manifests import component, pod_labels, workloads
from .netpol import NAMESPACE, Endpoint, Port, allowed_edges
from .rendering import COMBINATIONS, EXTERNAL, NETWORK_POLICIES, ROOT, Rendered

TCP = "TCP"
GATEWAY, STORAGE, SEARCH, ADMISSION = "8080/TCP", "50051/TCP", "50052/TCP", "50053/TCP"
MONGODB, REDIS = "27017/TCP", "6379/TCP"

# Who may call whom, and on which port. "outside" is anything outside the namespace (other
# namespaces, ingress controllers, load balancers, the internet); "admin" is an operator
# client pod (component=admin).
APP_EDGES = {
    ("outside", "gateway", GATEWAY),
    ("gateway", "storage", STORAGE),
    ("gateway", "search", SEARCH),
    ("gateway", "admission", ADMISSION),
    ("search", "storage", STORAGE),
    ("admission", "storage", STORAGE),
    ("worker", "storage", STORAGE),
    ("worker", "search", SEARCH),
    ("admin", "storage", STORAGE),
}
REDIS_CLIENTS = ("gateway", "storage", "admission", "worker", "beat")
IN_CLUSTER_EDGES = {
    ("storage", "mongodb", MONGODB),
    ("mongodb", "mongodb", MONGODB),
    ("mongodb-init", "mongodb", MONGODB),
    *((client, "redis", REDIS) for client in REDIS_CLIENTS),
}
MANAGED_EDGES = {
    ("storage", "managed-mongodb", MONGODB),
    *((client, "managed-redis", REDIS) for client in REDIS_CLIENTS),
}
DNS_PORTS = ("53/UDP", "53/TCP")

OUTSIDE = (
    Endpoint("other-namespace", namespace="elsewhere"),
    Endpoint("kube-dns", namespace="kube-system", labels={"k8s-app": "kube-dns"}),
    Endpoint("internet", address="203.0.113.10"),
    # Inside the documentation ranges that components/external-datastores ships.
    Endpoint("managed-mongodb", address="192.0.2.10"),
    Endpoint("managed-redis", address="198.51.100.10"),
)
EXTRA_PODS = (
    Endpoint("admin", NAMESPACE, {"app.kubernetes.io/part-of": "engram", "app.kubernetes.io/component": "admin"}),
    Endpoint("unlabelled-pod", NAMESPACE),
)
# Every port in play (the worker's and beat's health ports and the probe port included: only
# the kubelet reaches them), plus one nobody serves (a rule without ports would show up on it).
PORTS = (
    *(Port(TCP, n) for n in (53, 6379, 8080, 9999, 27017, 50051, 50052, 50053, 50054, 50055, 50060)),
    Port("UDP", 53),
)
WITH_POLICIES = [c.name for c in COMBINATIONS if NETWORK_POLICIES in c.components]


def _endpoints(manifests: Rendered) -> list[Endpoint]:
    pods = [Endpoint(component(w), NAMESPACE, pod_labels(w)) for w in workloads(manifests)]
    return [*pods, *EXTRA_PODS, *OUTSIDE]


def _expected(manifests: Rendered, endpoints: list[Endpoint]) -> set[tuple[str, str, str]]:
    present = {e.name for e in endpoints}
    pods = [e.name for e in endpoints if e.namespace == NAMESPACE]
    dns = {(pod, "kube-dns", port) for pod in pods for port in DNS_PORTS}
    from_outside = {(o.name, dst, port) for (src, dst, port) in APP_EDGES if src == "outside" for o in OUTSIDE}
    edges = {e for e in APP_EDGES | IN_CLUSTER_EDGES | from_outside | dns if e[0] in present and e[1] in present}
    return edges | (MANAGED_EDGES if manifests.combination.datastores == EXTERNAL else set())


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_network_policies_allow_exactly_the_documented_edges(rendered: dict[str, Rendered], name: str) -> None:
    manifests = rendered[name]
    endpoints = _endpoints(manifests)
    allowed = allowed_edges(manifests.of_kind("NetworkPolicy"), endpoints, PORTS)
    expected = _expected(manifests, endpoints)
    assert (sorted(allowed - expected), sorted(expected - allowed)) == ([], [])


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_beat_reaches_redis_and_dns_only_and_nothing_reaches_it(rendered: dict[str, Rendered], name: str) -> None:
    manifests = rendered[name]
    endpoints = _endpoints(manifests)
    allowed = allowed_edges(manifests.of_kind("NetworkPolicy"), endpoints, PORTS)
    redis = "managed-redis" if manifests.combination.datastores == EXTERNAL else "redis"
    dns = {("beat", "kube-dns", port) for port in DNS_PORTS}
    if any(e.name == redis for e in endpoints):
        # Redis admits it (its ingress policy, in-cluster) and its egress reaches Redis.
        assert {e for e in allowed if e[0] == "beat"} == {("beat", redis, REDIS)} | dns
    else:
        assert {e for e in allowed if e[0] == "beat"} == dns
    assert not [e for e in allowed if e[1] == "beat"]


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_every_pod_in_the_namespace_is_isolated_both_ways(rendered: dict[str, Rendered], name: str) -> None:
    (deny,) = [p for p in rendered[name].of_kind("NetworkPolicy") if p["metadata"]["name"] == "engram-default-deny"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_operations_guide_lists_the_same_edges() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("## Network edges", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)` \| `([\w-]+)` \| (\d+/(?:TCP|UDP)) \|", section, flags=re.MULTILINE)
    assert set(rows) == APP_EDGES | IN_CLUSTER_EDGES | MANAGED_EDGES
