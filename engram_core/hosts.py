"""The host registry (SPEC §2): which hosts the gateway trusts, by key, for which tenants.

The registry is a JSON file::

    {"hosts": [{"host_id": "host-a", "public_key": "<raw Ed25519, base64url>",
                "allowed_tenants": ["acme"]}]}

It is read at start (a bad file stops start-up with a message naming the problem) and re-read
when the file changes, so ``engram up`` / ``engram admin`` can register a host on a running
gateway: :meth:`HostRegistry.maybe_reload` costs one clock read per call and one ``stat`` at
most once per second, so a change — a host removed, a key replaced — takes effect within one
second. It fails closed: a file that is gone trusts no host (``state`` ``missing``) until it is
back; a malformed or unreadable one keeps the last valid registry in force, logs an error and
reports ``state`` ``invalid`` (the gateway's /readyz says so). Writers should replace the file
atomically (:func:`upsert_host` does).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engram_core.jws import public_key_from_b64url

log = logging.getLogger("engram.hosts")

MAX_ID_BYTES = 512
RELOAD_INTERVAL_SECONDS = 1.0
_HOST_FIELDS = frozenset({"host_id", "public_key", "allowed_tenants"})
# HostRegistry.state: the file read as it is; gone (no host trusted); bad (the last valid kept).
OK, MISSING, INVALID = "ok", "missing", "invalid"


class HostRegistryError(ValueError):
    """The registry file is unreadable or malformed. The message names the problem (never key
    material)."""


@dataclass(frozen=True)
class HostEntry:
    host_id: str
    public_key: Ed25519PublicKey
    public_key_b64url: str
    allowed_tenants: frozenset[str]


def _check_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise HostRegistryError(f"host registry: {what} must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise HostRegistryError(f"host registry: {what} is not valid Unicode") from None
    if size > MAX_ID_BYTES:
        raise HostRegistryError(f"host registry: {what} exceeds {MAX_ID_BYTES} UTF-8 bytes")
    return value


def parse_registry(data: Any) -> dict[str, HostEntry]:
    """Validate a decoded registry document into ``{host_id: HostEntry}``.

    Raises :class:`HostRegistryError`: not an object with exactly a ``hosts`` list; a host
    that is not an object with exactly ``host_id``, ``public_key``, ``allowed_tenants``;
    an empty or oversize id; a key that is not 32 raw bytes in strict base64url; a duplicate
    host_id or tenant.
    """
    if not isinstance(data, dict) or set(data) != {"hosts"} or not isinstance(data["hosts"], list):
        raise HostRegistryError('host registry: top level must be {"hosts": [...]}')
    entries: dict[str, HostEntry] = {}
    for index, host in enumerate(data["hosts"]):
        where = f"hosts[{index}]"
        if not isinstance(host, dict) or set(host) != _HOST_FIELDS:
            raise HostRegistryError(
                f"host registry: {where} must be an object with exactly host_id, public_key, allowed_tenants"
            )
        host_id = _check_id(host["host_id"], f"{where}.host_id")
        if host_id in entries:
            raise HostRegistryError(f"host registry: {where} repeats a host_id")
        key_text = host["public_key"]
        try:
            if not isinstance(key_text, str):
                raise ValueError
            public_key = public_key_from_b64url(key_text)
        except ValueError:
            raise HostRegistryError(
                f"host registry: {where}.public_key is not a raw 32-byte Ed25519 key in base64url"
            ) from None
        tenants = host["allowed_tenants"]
        if not isinstance(tenants, list):
            raise HostRegistryError(f"host registry: {where}.allowed_tenants must be a list")
        checked = [_check_id(t, f"{where}.allowed_tenants[{i}]") for i, t in enumerate(tenants)]
        if len(set(checked)) != len(checked):
            raise HostRegistryError(f"host registry: {where}.allowed_tenants has duplicates")
        entries[host_id] = HostEntry(host_id, public_key, key_text, frozenset(checked))
    return entries


def _read(path: str) -> tuple[dict[str, HostEntry], tuple[int, int, int] | None]:
    try:
        with open(path, "rb") as handle:
            stamp = _stamp_fd(handle.fileno())
            raw = handle.read()
    except OSError as exc:
        raise HostRegistryError(f"host registry {path}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise HostRegistryError(f"host registry {path}: not valid JSON") from None
    return parse_registry(data), stamp


def _stamp_fd(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class HostRegistry:
    """Trusted hosts by host_id; optionally backed by a file that is re-read when it changes."""

    def __init__(
        self,
        entries: Mapping[str, HostEntry] | Iterable[HostEntry] = (),
        *,
        path: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        reload_interval: float = RELOAD_INTERVAL_SECONDS,
    ) -> None:
        items = entries.values() if isinstance(entries, Mapping) else entries
        self._entries: dict[str, HostEntry] = {e.host_id: e for e in items}
        self._path = path
        self._clock = clock
        self._interval = reload_interval
        self._stamp: tuple[int, int, int] | None = None
        self._next_check = clock() + reload_interval
        self._lock = threading.Lock()
        self._state = OK

    @classmethod
    def load(
        cls,
        path: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        reload_interval: float = RELOAD_INTERVAL_SECONDS,
    ) -> "HostRegistry":
        """Load the registry file. Raises :class:`HostRegistryError` with a clear message."""
        entries, stamp = _read(path)
        registry = cls(entries, path=path, clock=clock, reload_interval=reload_interval)
        registry._stamp = stamp
        return registry

    def get(self, host_id: str) -> HostEntry | None:
        """The entry for ``host_id``, or ``None`` if the host is not registered."""
        return self._entries.get(host_id)

    def public_key(self, host_id: str) -> Ed25519PublicKey | None:
        """The host's verification key (a ``resolve_key`` for :func:`verify_compact`)."""
        entry = self._entries.get(host_id)
        return entry.public_key if entry is not None else None

    def host_ids(self) -> frozenset[str]:
        return frozenset(self._entries)

    @property
    def state(self) -> str:
        """``ok``, ``missing`` (the file is gone: no host is trusted) or ``invalid`` (the file
        cannot be used: the last valid registry stays in force)."""
        return self._state

    def maybe_reload(self) -> bool:
        """Re-read the file if it changed; checked at most once per ``reload_interval``.

        Returns True when a new registry took effect. A file that is gone empties it (no host
        is trusted; logged once); one that became unreadable or malformed keeps the current
        registry and logs an error (once per version of the bad file).
        """
        if self._path is None or self._clock() < self._next_check:
            return False
        with self._lock:
            now = self._clock()
            if now < self._next_check:
                return False
            self._next_check = now + self._interval
            stamp = _stamp(self._path)
            if stamp is None:
                if self._state == MISSING:
                    return False
                log.error("host registry %s is missing: no host is trusted until it is back", self._path)
                self._entries, self._stamp, self._state = {}, None, MISSING
                return True
            if stamp == self._stamp:
                return False
            try:
                entries, new_stamp = _read(self._path)
            except HostRegistryError as exc:
                log.error("host registry reload failed; the last valid registry stays in force: %s", exc)
                self._stamp, self._state = stamp, INVALID
                return False
            self._entries, self._stamp, self._state = entries, new_stamp, OK
            log.info("host registry reloaded: %d host(s)", len(entries))
            return True


def upsert_host(path: str, host_id: str, public_key_b64url: str, allowed_tenants: Iterable[str]) -> None:
    """Add or replace one host in the registry file (created if absent), atomically.

    Writers serialise on ``path + ".lock"`` (``flock``), so concurrent ``engram up`` /
    ``engram admin`` runs do not lose each other's updates. The result is validated before it
    replaces the file, so a running gateway never reads a half-written or invalid registry.
    """
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            _upsert_locked(path, host_id, public_key_b64url, list(allowed_tenants))
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _upsert_locked(path: str, host_id: str, public_key_b64url: str, allowed_tenants: list[str]) -> None:
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            raise HostRegistryError(f"host registry {path}: cannot read it as JSON") from None
        parse_registry(data)
    else:
        data = {"hosts": []}
    hosts = [h for h in data["hosts"] if h["host_id"] != host_id]
    hosts.append({"host_id": host_id, "public_key": public_key_b64url, "allowed_tenants": allowed_tenants})
    document = {"hosts": hosts}
    parse_registry(document)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
