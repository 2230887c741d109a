"""Every search replica an invalidation must reach.

``ENGRAM_SEARCH_REPLICAS`` lists ``host:port`` entries (comma-separated); each host name is
resolved to every address it has at the time of the call, so a Kubernetes headless Service
names every ready search pod, and a pod that restarts (and so forgot everything it held) drops
out until it is ready again. Unset, the one ``ENGRAM_SEARCH_ADDR`` target is used as given.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Sequence

from engram_api.search.v1 import search_pb2_grpc
from engram_core.transport import ReloadingStub, Transport

Resolver = Callable[[str, int], Sequence[str]]


def _split(entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("search replica entries are host:port")
    return host.strip("[]"), int(port)


def check_spec(spec: str) -> str:
    """``spec`` if every entry is ``host:port`` (ValueError otherwise)."""
    for entry in spec.split(","):
        if entry.strip():
            _split(entry.strip())
    return spec


def resolve_all(host: str, port: int) -> list[str]:
    """Every address of ``host`` (an IP literal is its own), as ``address:port`` targets."""
    try:
        ipaddress.ip_address(host)
        addresses = [host]
    except ValueError:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = sorted({str(info[4][0]) for info in infos})
    return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in addresses]


class SearchReplicas:
    """The search replicas to call now, each with a cached stub. Thread-safe."""

    def __init__(self, spec: str, fallback: str, transport: Transport | None = None,
                 resolver: Resolver = resolve_all) -> None:
        self._entries = [_split(entry.strip()) for entry in spec.split(",") if entry.strip()]
        self._fallback = fallback
        self._transport = transport or Transport.plaintext()
        self._resolver = resolver
        self._stubs: dict[str, ReloadingStub[search_pb2_grpc.SearchServiceStub]] = {}
        self._lock = threading.Lock()

    def targets(self) -> list[str]:
        """The replicas' addresses, resolved now (OSError when a name does not resolve)."""
        if not self._entries:
            return [self._fallback]
        found: set[str] = set()
        for host, port in self._entries:
            found.update(self._resolver(host, port))
        return sorted(found)

    def stub(self, target: str) -> ReloadingStub[search_pb2_grpc.SearchServiceStub]:
        with self._lock:
            stub = self._stubs.get(target)
            if stub is None:
                stub = self._stubs[target] = self._transport.stub(
                    search_pb2_grpc.SearchServiceStub, target, "search", aio=False)
            return stub
