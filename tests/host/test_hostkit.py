"""engram_hostkit: keys, keygen CLI, host file, token minting defaults."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import engram_hostkit
from engram_core.digests import operation_digest
from engram_core.jws import b64url_decode, private_key_from_b64url, public_key_from_b64url, public_key_to_b64url, verify_compact
from engram_hostkit.hostfile import HostFile, HostFileError
from engram_hostkit.keys import generate_host_keys, keygen_main
from engram_hostkit.tokens import (
    CONFIRMATION_TYP,
    CONTEXT_TYP,
    format_instant_ms,
    mint_confirmation,
    mint_context,
)
from engram_core.host_context import parse_instant_ms

from .conftest import FORGET_ARGS, NOW


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_generate_host_keys_pair_up():
    private_key, public_key = generate_host_keys()
    assert len(b64url_decode(private_key)) == 32 and len(b64url_decode(public_key)) == 32
    assert public_key_to_b64url(private_key_from_b64url(private_key).public_key()) == public_key
    assert generate_host_keys() != generate_host_keys()


def test_keygen_prints_both_keys(capsys):
    assert keygen_main([]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"private_key", "public_key"}
    assert public_key_to_b64url(private_key_from_b64url(printed["private_key"]).public_key()) == printed["public_key"]


def test_keygen_out_writes_0600_and_prints_only_public(tmp_path: Path, capsys):
    out = tmp_path / "host-key.json"
    assert keygen_main(["--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"public_key"}
    stored = json.loads(out.read_text())
    assert stored["public_key"] == printed["public_key"]
    assert stored["private_key"] not in json.dumps(printed)
    assert _mode(out) == 0o600


def test_keygen_refuses_overwrite_unless_forced(tmp_path: Path, capsys):
    out = tmp_path / "host-key.json"
    assert keygen_main(["--out", str(out)]) == 0
    first = out.read_text()
    assert keygen_main(["--out", str(out)]) == 1
    assert out.read_text() == first
    assert keygen_main(["--out", str(out), "--force"]) == 0
    assert out.read_text() != first and _mode(out) == 0o600
    capsys.readouterr()


def test_keygen_unwritable_directory(tmp_path: Path, capsys):
    assert keygen_main(["--out", str(tmp_path / "missing-dir" / "k.json")]) == 1
    assert capsys.readouterr().out == ""


def _host_file(**overrides) -> HostFile:
    private_key, public_key = generate_host_keys()
    values = dict(host_id="dev-host", private_key=private_key, public_key=public_key, audience="engram-dev",
                  mcp_url="http://127.0.0.1:8787/mcp", tenant="dev", workspace="default")
    values.update(overrides)
    return HostFile(**values)


def test_host_file_round_trip_0600(tmp_path: Path):
    host = _host_file()
    path = tmp_path / "host.json"
    host.save(str(path))
    assert _mode(path) == 0o600
    assert HostFile.load(str(path)) == host
    host.save(str(path))  # overwriting keeps 0600
    assert _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["host.json"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.pop("audience"),
        lambda d: d.update(extra="x"),
        lambda d: d.update(tenant=""),
        lambda d: d.update(workspace=3),
        lambda d: d.update(private_key="not-a-key"),
        lambda d: d.update(public_key=generate_host_keys()[1]),
    ],
    ids=["missing", "unknown", "empty", "type", "bad-key", "key-mismatch"],
)
def test_host_file_validation(tmp_path: Path, mutate):
    data = dict(_host_file().__dict__)
    mutate(data)
    path = tmp_path / "host.json"
    path.write_text(json.dumps(data))
    with pytest.raises(HostFileError) as info:
        HostFile.load(str(path))
    assert str(data.get("private_key")) not in str(info.value)  # never echoes key material


def test_host_file_unreadable_or_not_json(tmp_path: Path):
    with pytest.raises(HostFileError):
        HostFile.load(str(tmp_path / "absent.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(HostFileError):
        HostFile.load(str(bad))
    bad.write_text("[]")
    with pytest.raises(HostFileError):
        HostFile.load(str(bad))


def test_host_file_save_refuses_invalid(tmp_path: Path):
    with pytest.raises(HostFileError):
        _host_file(tenant="").save(str(tmp_path / "host.json"))
    assert not (tmp_path / "host.json").exists()


def _claims(token: str, typ: str, public_key: str) -> tuple[dict, dict]:
    return verify_compact(token, lambda kid: public_key_from_b64url(public_key), typ)


def test_mint_context_defaults():
    private_key, public_key = generate_host_keys()
    common = dict(host_id="h", audience="aud", tenant="t", workspace="w", principal="p", agent_id="a",
                  session="s", purpose_ref="r", tools=("engram_memory_get",), now=NOW)
    header, claims = _claims(mint_context(private_key, **common), CONTEXT_TYP, public_key)
    assert header == {"alg": "EdDSA", "typ": CONTEXT_TYP, "kid": "h"}
    assert claims["iss"] == "h" and claims["aud"] == "aud"
    assert claims["iat"] == NOW and claims["exp"] == NOW + 120
    assert parse_instant_ms(claims["deadline"]) == int(NOW * 1000) + 60_000
    assert claims["tools"] == ["engram_memory_get"]
    assert 16 <= len(claims["jti"]) <= 128 and claims["audit_id"]
    _, again = _claims(mint_context(private_key, **common), CONTEXT_TYP, public_key)
    assert again["jti"] != claims["jti"] and again["audit_id"] != claims["audit_id"]


def test_mint_confirmation_computes_operation_digest():
    private_key, public_key = generate_host_keys()
    token = mint_confirmation(private_key, host_id="h", audience="aud", tenant="t", workspace="w", principal="p",
                              tool="engram_memory_forget", target=FORGET_ARGS["record_id"], arguments=FORGET_ARGS,
                              approver="human:x", now=NOW, approved_at=NOW + 2)
    header, claims = _claims(token, CONFIRMATION_TYP, public_key)
    assert header["typ"] == CONFIRMATION_TYP and header["kid"] == "h"
    assert claims["operation_digest"] == operation_digest("engram_memory_forget", FORGET_ARGS)
    assert (claims["iat"], claims["approved_at"], claims["exp"]) == (NOW, NOW + 2, NOW + 120)


def test_format_instant_ms():
    assert format_instant_ms(int(NOW * 1000)) == "2026-01-01T00:00:00.000Z"
    assert format_instant_ms(1835481599999) == "2028-02-29T23:59:59.999Z"
    assert format_instant_ms(7) == "1970-01-01T00:00:00.007Z"
    for ms in (0, 1, 999, 1000, 1835481599999, 253402300799999):
        assert parse_instant_ms(format_instant_ms(ms)) == ms


def test_package_exports():
    for name in ("mint_context", "mint_confirmation", "generate_host_keys", "keygen_main", "HostFile",
                 "operation_digest", "CONTEXT_META_KEY", "CONFIRMATION_META_KEY"):
        assert hasattr(engram_hostkit, name)
    assert engram_hostkit.CONTEXT_META_KEY == "io.engram/context"
    assert engram_hostkit.CONFIRMATION_META_KEY == "io.engram/confirmation"
