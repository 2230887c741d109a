"""Evaluate rendered NetworkPolicies: which connections between endpoints do they allow?

Semantics of networking.k8s.io/v1: a pod selected by no policy of a direction is open in that
direction; a selected pod allows what any selecting policy's rules allow; a connection needs
the source's egress and the destination's ingress. Sources outside the namespace are not
governed here (their egress is open), nor are destinations outside the cluster (no ingress).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .manifests import selector_matches
from .rendering import Doc

NAMESPACE = "engram"


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace and labels) or an address outside the cluster."""

    name: str
    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    address: str | None = None

    @property
    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace} if self.namespace else {}


@dataclass(frozen=True)
class Port:
    protocol: str
    number: int

    def __str__(self) -> str:
        return f"{self.number}/{self.protocol}"


def _peer_matches(peer: dict[str, Any], endpoint: Endpoint) -> bool:
    if "ipBlock" in peer:
        if endpoint.address is None:
            return False
        address = ipaddress.ip_address(endpoint.address)
        block = peer["ipBlock"]
        excluded = any(address in ipaddress.ip_network(e) for e in block.get("except", []))
        return address in ipaddress.ip_network(block["cidr"]) and not excluded
    if endpoint.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], endpoint.namespace_labels):
            return False
    elif endpoint.namespace != NAMESPACE:
        return False
    return selector_matches(peer.get("podSelector", {}), endpoint.labels)


def _port_matches(entries: list[dict[str, Any]] | None, port: Port) -> bool:
    if not entries:
        return True
    for entry in entries:
        number = entry.get("port")
        if number is not None and not isinstance(number, int):
            raise AssertionError(f"named port {number!r}: give NetworkPolicies numeric ports")
        in_range = number is None or number <= port.number <= entry.get("endPort", number)
        if entry.get("protocol", "TCP") == port.protocol and in_range:
            return True
    return False


def _types(policy: Doc) -> list[str]:
    spec = policy["spec"]
    return spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))


def _allows(policies: list[Doc], direction: str, subject: Endpoint, peer: Endpoint, port: Port) -> bool:
    """Whether ``subject``'s policies of ``direction`` admit ``peer`` on ``port``."""
    if subject.namespace != NAMESPACE:
        return True
    selecting = [
        p for p in policies if direction in _types(p) and selector_matches(p["spec"]["podSelector"], subject.labels)
    ]
    if not selecting:
        return True
    rules_key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if _port_matches(rule.get("ports"), port) and (not peers or any(_peer_matches(x, peer) for x in peers)):
                return True
    return False


def allowed_edges(
    policies: list[Doc], endpoints: Iterable[Endpoint], ports: Iterable[Port]
) -> set[tuple[str, str, str]]:
    """Every (source, destination, "port/protocol") the policies allow among ``endpoints``."""
    points = list(endpoints)
    edges = set()
    for src in points:
        for dst in points:
            for port in ports:
                if NAMESPACE not in (src.namespace, dst.namespace):
                    continue  # neither end is ours
                if _allows(policies, "Egress", src, dst, port) and _allows(policies, "Ingress", dst, src, port):
                    edges.add((src.name, dst.name, str(port)))
    return edges
