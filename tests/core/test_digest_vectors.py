"""The published test vectors of docs/digests.md, recomputed with an independent hash."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest

from engram_core.canonical import canonicalize
from engram_core.digests import digest
from tests.conftest import ROOT


def vectors() -> list[dict]:
    text = (ROOT / "docs" / "digests.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block is not None
    return json.loads(block.group(1))


def b32(raw: bytes) -> str:
    return base64.b32encode(raw).decode().rstrip("=").lower()


@pytest.mark.parametrize("vector", vectors(), ids=lambda v: v["name"])
def test_vector(vector: dict) -> None:
    jcs = canonicalize(vector["value"])
    assert jcs.decode("utf-8") == vector["jcs"]
    raw = hashlib.sha256(f"engram/{vector['kind']}/v1".encode("ascii") + b"\x00" + jcs).digest()
    assert vector["digest"] == "sha256:" + raw.hex() == digest(vector["kind"], vector["value"])
    if "candidate_id" in vector:
        assert vector["candidate_id"] == "cand_" + b32(raw)
    if "record_id" in vector:
        assert vector["record_id"] == "mem_" + b32(raw)


def test_there_are_vectors_for_every_derived_id() -> None:
    names = {key for v in vectors() for key in v}
    assert {"candidate_id", "record_id"} <= names
