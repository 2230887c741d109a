"""engram_core.hosts: registry file validation, lookup, throttled hot reload."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from engram_core.jws import b64url_encode
from engram_core.hosts import HostRegistry, HostRegistryError, upsert_host

from .conftest import Clock, new_host, write_registry


def _doc(**host):
    base = {"host_id": "h1", "public_key": new_host("h1", []).public_key, "allowed_tenants": ["t1"]}
    base.update(host)
    return {"hosts": [base]}


def _write(path: Path, document) -> None:
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)


def test_load_and_get(tmp_path: Path):
    a, b = new_host("a", ["t1", "t2"]), new_host("b", [])
    path = tmp_path / "hosts.json"
    write_registry(path, [a, b])
    registry = HostRegistry.load(str(path))
    entry = registry.get("a")
    assert entry is not None and entry.allowed_tenants == frozenset({"t1", "t2"})
    assert entry.public_key_b64url == a.public_key
    assert registry.get("b").allowed_tenants == frozenset()
    assert registry.get("c") is None
    assert registry.public_key("c") is None
    assert registry.host_ids() == frozenset({"a", "b"})


def test_empty_registry_is_valid(tmp_path: Path):
    path = tmp_path / "hosts.json"
    _write(path, {"hosts": []})
    assert HostRegistry.load(str(path)).host_ids() == frozenset()


@pytest.mark.parametrize(
    "document",
    [
        "not json",
        "[]",
        {},
        {"hosts": {}},
        {"hosts": [], "extra": 1},
        {"hosts": [1]},
        _doc(host_id=""),
        _doc(host_id=5),
        _doc(host_id="x" * 513),
        _doc(public_key="not-a-key"),
        _doc(public_key=b64url_encode(b"\x01" * 31)),
        _doc(public_key=b64url_encode(b"\x01" * 33)),
        _doc(public_key=None),
        _doc(allowed_tenants="t1"),
        _doc(allowed_tenants=["t1", "t1"]),
        _doc(allowed_tenants=[""]),
        _doc(allowed_tenants=[3]),
        _doc(comment="typo-guard"),
        {"hosts": [{"host_id": "h1", "public_key": new_host("h1", []).public_key}]},
    ],
)
def test_bad_file_at_start_raises(tmp_path: Path, document):
    path = tmp_path / "hosts.json"
    _write(path, document)
    with pytest.raises(HostRegistryError):
        HostRegistry.load(str(path))


def test_id_bound_512_bytes_ok(tmp_path: Path):
    path = tmp_path / "hosts.json"
    _write(path, _doc(host_id="é" * 256, allowed_tenants=["x" * 512]))
    assert HostRegistry.load(str(path)).get("é" * 256) is not None


def test_duplicate_host_refused(tmp_path: Path):
    host = new_host("h1", [])
    path = tmp_path / "hosts.json"
    write_registry(path, [host, host])
    with pytest.raises(HostRegistryError):
        HostRegistry.load(str(path))


def test_missing_file_at_start_raises(tmp_path: Path):
    with pytest.raises(HostRegistryError):
        HostRegistry.load(str(tmp_path / "absent.json"))


def test_error_message_never_contains_key_material(tmp_path: Path):
    key = new_host("h1", []).public_key
    path = tmp_path / "hosts.json"
    _write(path, _doc(public_key=key + "A"))
    with pytest.raises(HostRegistryError) as info:
        HostRegistry.load(str(path))
    assert key not in str(info.value)


def test_hot_reload_is_throttled_and_picks_up_changes(tmp_path: Path):
    a, b = new_host("a", ["t1"]), new_host("b", ["t2"])
    path = tmp_path / "hosts.json"
    write_registry(path, [a])
    clock = Clock(100.0)
    registry = HostRegistry.load(str(path), clock=clock)
    write_registry(path, [a, b])
    assert registry.maybe_reload() is False  # checked at most once per second
    clock.advance(0.999)
    assert registry.maybe_reload() is False and registry.get("b") is None
    clock.advance(0.001)
    assert registry.maybe_reload() is True and registry.get("b") is not None
    clock.advance(1.0)
    assert registry.maybe_reload() is False  # unchanged file: no re-read
    write_registry(path, [b])
    clock.advance(1.0)
    assert registry.maybe_reload() is True
    assert registry.get("a") is None and registry.get("b") is not None


def test_bad_reload_keeps_previous_registry_and_logs_an_error_without_key(tmp_path: Path, caplog):
    a = new_host("a", ["t1"])
    path = tmp_path / "hosts.json"
    write_registry(path, [a])
    clock = Clock(0.0)
    registry = HostRegistry.load(str(path), clock=clock)
    _write(path, _doc(host_id="z", public_key=a.public_key + "AAAA"))
    clock.advance(1.0)
    with caplog.at_level(logging.WARNING, logger="engram.hosts"):
        assert registry.maybe_reload() is False
    assert registry.get("a") is not None and registry.get("z") is None
    assert registry.state == "invalid"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert a.public_key not in errors[0].getMessage()
    caplog.clear()
    clock.advance(1.0)
    with caplog.at_level(logging.WARNING, logger="engram.hosts"):
        assert registry.maybe_reload() is False  # same bad file: no second error
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    b = new_host("b", ["t2"])
    write_registry(path, [b])
    clock.advance(1.0)
    assert registry.maybe_reload() is True and registry.get("b") is not None
    assert registry.state == "ok"


def test_a_deleted_file_trusts_no_host_until_it_is_back(tmp_path: Path, caplog):
    a = new_host("a", ["t1"])
    path = tmp_path / "hosts.json"
    write_registry(path, [a])
    clock = Clock(0.0)
    registry = HostRegistry.load(str(path), clock=clock)
    os.unlink(path)
    clock.advance(1.0)
    with caplog.at_level(logging.ERROR, logger="engram.hosts"):
        assert registry.maybe_reload() is True
    assert registry.get("a") is None and registry.host_ids() == frozenset() and registry.state == "missing"
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    clock.advance(1.0)
    assert registry.maybe_reload() is False  # still gone: nothing new, no second error
    write_registry(path, [a])
    clock.advance(1.0)
    assert registry.maybe_reload() is True and registry.get("a") is not None and registry.state == "ok"


def test_a_revoked_host_is_refused_within_one_second_of_the_file_change(tmp_path: Path):
    """With the real clock: the host removed from the file is gone at the next check, which
    comes at most one reload interval (1 s) after the change."""
    import time

    a, b = new_host("a", ["t1"]), new_host("b", ["t1"])
    path = tmp_path / "hosts.json"
    write_registry(path, [a, b])
    registry = HostRegistry.load(str(path))
    write_registry(path, [b])
    changed = time.monotonic()
    while registry.get("a") is not None:
        registry.maybe_reload()
        assert time.monotonic() - changed <= 1.05
        time.sleep(0.01)
    assert registry.get("b") is not None


def test_registry_without_file_never_reloads():
    clock = Clock(0.0)
    registry = HostRegistry(clock=clock)
    clock.advance(10.0)
    assert registry.maybe_reload() is False and registry.host_ids() == frozenset()


def test_upsert_host_creates_replaces_and_validates(tmp_path: Path):
    path = tmp_path / "hosts.json"
    a, b = new_host("a", ["t1"]), new_host("b", ["t2"])
    upsert_host(str(path), a.host_id, a.public_key, a.tenants)
    upsert_host(str(path), b.host_id, b.public_key, b.tenants)
    upsert_host(str(path), a.host_id, a.public_key, ["t3"])
    registry = HostRegistry.load(str(path))
    assert registry.get("a").allowed_tenants == frozenset({"t3"})
    assert registry.get("b") is not None
    before = path.read_text()
    with pytest.raises(HostRegistryError):
        upsert_host(str(path), "c", "bad-key", ["t1"])
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts.json", "hosts.json.lock"]  # no temp left


def test_concurrent_upserts_lose_nothing(tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "hosts.json"
    hosts = [new_host(f"h{i}", [f"t{i}"]) for i in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda h: upsert_host(str(path), h.host_id, h.public_key, h.tenants), hosts))
    assert HostRegistry.load(str(path)).host_ids() == frozenset(h.host_id for h in hosts)
