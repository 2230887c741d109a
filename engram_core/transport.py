"""The internal gRPC plane's transport: mutual TLS with one service identity per process.

A process's identity is the certificate in ``ENGRAM_TLS_DIR`` (``ca.crt``, ``tls.crt``,
``tls.key``: the layout of a cert-manager Secret; see :mod:`engram_core.pki`). Its servers
require a client certificate of the same CA and hand the caller's identity to the access check
(:mod:`engram_core.access`); its clients present the certificate and verify the server's.
Plaintext gRPC only with ``ENGRAM_GRPC_PLAINTEXT=true``, a development setting: no caller is
then authenticated and every process says so in its log at start.

Rotation without downtime: the files are looked at again (size and modification time, at most
every :data:`RELOAD_CHECK_SECONDS`) — by a server at each new TLS handshake, by a client stub
(:meth:`Transport.stub`) before a call — and a changed set is loaded: new connections use it,
established ones are left to finish (a client's old channel is closed after
:data:`OLD_CHANNEL_GRACE_SECONDS`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc

from engram_core.pki import IdentityFiles, certificate_identity, server_name

log = logging.getLogger("engram.transport")

MESSAGE_OPTIONS = [
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
]
# Keepalive (docs/operations.md, "gRPC connections"): a client pings an idle-looking connection
# with calls in flight every 60 s and drops it after 20 s without an answer (a peer that
# vanished without a FIN: a node lost, a NAT entry expired); servers accept pings down to 30 s
# apart, so a client never trips the server's too-many-pings guard.
KEEPALIVE_TIME_MS = 60_000
KEEPALIVE_TIMEOUT_MS = 20_000
MIN_PING_INTERVAL_MS = 30_000
# Calls are spread round-robin over every address a target names (``ipv4:a:p,b:q``, or a
# ``dns:///`` name with several records: search replicas).
CHANNEL_OPTIONS = [
    *MESSAGE_OPTIONS,
    ("grpc.lb_policy_name", "round_robin"),
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 0),
]
RELOAD_CHECK_SECONDS = 5.0
OLD_CHANNEL_GRACE_SECONDS = 60.0


class TransportError(RuntimeError):
    """The TLS files cannot be used (missing, unreadable, or no service identity)."""


Stamp = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Credentials:
    """One loaded set of PEM files and the identity its certificate names."""

    ca: bytes
    cert: bytes
    key: bytes
    identity: str
    stamp: Stamp


def _stamp(files: IdentityFiles) -> Stamp:
    stats = [os.stat(path) for path in (files.ca, files.cert, files.key)]
    return tuple((s.st_mtime_ns, s.st_size) for s in stats)


def load_credentials(files: IdentityFiles) -> Credentials:
    try:
        stamp = _stamp(files)
        ca, cert, key = files.read()
    except OSError as exc:
        raise TransportError(f"cannot read the TLS files in {files.directory}: {exc.strerror}") from None
    identity = certificate_identity(cert)
    if identity is None:
        raise TransportError(f"{files.cert} names no engram service identity (SAN URI spiffe://engram/<name>)")
    return Credentials(ca, cert, key, identity, stamp)


class _Watched:
    """The current credentials of one directory, reloaded when the files change (at most one
    look every RELOAD_CHECK_SECONDS). A half-written set (a rotation in progress) keeps the old
    one until it loads whole. Thread-safe: gRPC calls the server's fetcher from its own
    threads."""

    def __init__(self, files: IdentityFiles) -> None:
        self.files = files
        self.current = load_credentials(files)
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        """Whether a new set was loaded just now."""
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_SECONDS:
            return False
        with self._lock:
            if now - self._checked < RELOAD_CHECK_SECONDS:
                return False
            self._checked = now
            try:
                if _stamp(self.files) == self.current.stamp:
                    return False
                fresh = load_credentials(self.files)
            except (OSError, TransportError, ValueError):
                log.warning("TLS files changed but cannot be loaded yet; keeping the current certificate")
                return False
            if fresh.identity != self.current.identity:
                log.error("TLS files changed to another service identity; keeping the current certificate")
                return False
            self.current = fresh
        log.info("TLS certificate reloaded")
        return True


S = TypeVar("S")


class ReloadingStub(Generic[S]):
    """A stub whose channel is rebuilt when the process's certificate changes; attribute access
    returns the current stub's method."""

    def __init__(self, make: Callable[[], tuple[Any, S]], watched: _Watched | None, aio: bool) -> None:
        self._make = make
        self._watched = watched
        self._aio = aio
        self._stamp = watched.current.stamp if watched is not None else ()
        self._channel, self._stub = make()

    @property
    def channel(self) -> Any:
        return self._channel

    def __getattr__(self, name: str) -> Any:
        watched = self._watched
        if watched is not None:
            watched.refresh()
            if watched.current.stamp != self._stamp:
                self._stamp = watched.current.stamp
                old = self._channel
                self._channel, self._stub = self._make()
                self._retire(old)
        return getattr(self._stub, name)

    def _retire(self, old: Any) -> None:
        if self._aio:
            loop = asyncio.get_running_loop()
            loop.call_later(OLD_CHANNEL_GRACE_SECONDS, lambda: loop.create_task(old.close()))
        else:
            timer = threading.Timer(OLD_CHANNEL_GRACE_SECONDS, old.close)
            timer.daemon = True
            timer.start()


class Transport:
    """How this process speaks gRPC: mutual TLS as the identity in ``tls_dir``, or plaintext
    (``tls_dir`` None; development only)."""

    def __init__(self, tls_dir: Path | None) -> None:
        self.tls_dir = tls_dir
        self._watch = _Watched(IdentityFiles(tls_dir)) if tls_dir is not None else None

    @classmethod
    def plaintext(cls) -> "Transport":
        return cls(None)

    @classmethod
    def from_settings(cls, settings: Any) -> "Transport":
        """From ``tls_dir`` / ``grpc_plaintext`` of a :class:`BaseEngramSettings`."""
        if settings.grpc_plaintext:
            log.warning("plaintext gRPC (ENGRAM_GRPC_PLAINTEXT): internal callers are not authenticated")
            return cls.plaintext()
        if settings.tls_dir is None:
            raise TransportError("ENGRAM_TLS_DIR is not set (or set ENGRAM_GRPC_PLAINTEXT=true for development)")
        transport = cls(Path(settings.tls_dir))
        log.info("gRPC mutual TLS as %s", transport.identity)
        return transport

    @property
    def secure(self) -> bool:
        return self._watch is not None

    @property
    def identity(self) -> str | None:
        return self._watch.current.identity if self._watch is not None else None

    # -- servers ------------------------------------------------------------------------------

    def add_port(self, server: Any, address: str) -> int:
        """Bind ``address`` on a grpc (sync or aio) server; returns the port (0: not bound)."""
        if self._watch is None:
            return int(server.add_insecure_port(address))
        return int(server.add_secure_port(address, self._server_credentials()))

    def _server_credentials(self) -> grpc.ServerCredentials:
        assert self._watch is not None
        watched = _Watched(self._watch.files)

        def config(creds: Credentials) -> grpc.ServerCertificateConfiguration:
            return grpc.ssl_server_certificate_configuration([(creds.key, creds.cert)], root_certificates=creds.ca)

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            return config(watched.current) if watched.refresh() else None

        return grpc.dynamic_ssl_server_credentials(config(watched.current), fetch,
                                                   require_client_authentication=True)

    # -- clients ------------------------------------------------------------------------------

    def _channel_credentials(self) -> grpc.ChannelCredentials:
        assert self._watch is not None
        creds = self._watch.current
        return grpc.ssl_channel_credentials(creds.ca, creds.key, creds.cert)

    @staticmethod
    def _tls_options(peer: str) -> list[tuple[str, Any]]:
        # The server must prove ``peer``'s identity, whatever address was dialled.
        return [*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", server_name(peer))]

    def channel(self, address: str, peer: str) -> grpc.aio.Channel:
        """An asyncio channel to the ``peer`` identity's server at ``address``, with the
        servers' message limits (round robin over every address the target names)."""
        if self._watch is None:
            return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        return grpc.aio.secure_channel(address, self._channel_credentials(), options=self._tls_options(peer))

    def sync_channel(self, address: str, peer: str) -> grpc.Channel:
        """A blocking channel (the worker's threads), same rules."""
        if self._watch is None:
            return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        return grpc.secure_channel(address, self._channel_credentials(), options=self._tls_options(peer))

    def stub(self, stub_class: Callable[[Any], S], address: str, peer: str, *, aio: bool = True) -> ReloadingStub[S]:
        """A stub on its own channel to ``peer`` at ``address``, rebuilt when this process's
        certificate is rotated."""

        def make() -> tuple[Any, S]:
            chan = self.channel(address, peer) if aio else self.sync_channel(address, peer)
            return chan, stub_class(chan)

        return ReloadingStub(make, self._watch, aio)
