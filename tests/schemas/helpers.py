"""Shared helpers for the schema tests: base fixtures, path access, assertions on codes."""

from __future__ import annotations

import copy
from typing import Any, Iterator

import pytest

from engram_core.errors import Code, EngramError
from engram_core.schemas.tools import TOOLS
from engram_core.schemas.validate import validate_arguments
from engram_hostkit.examples import (
    make_capture_args,
    make_forget_args,
    make_get_args,
    make_request_admission_args,
    make_search_args,
    make_withdraw_args,
)

# 2026-01-01T00:00:00.000Z
NOW_MS = 1_767_225_600_000
FUTURE = "2030-06-15T12:00:00.000Z"
RECORD_ID = "mem_" + "a" * 52
CANDIDATE_ID = "cand_" + "b" * 52
KEY = "test-idempotency-key-0001"
PURPOSE = "purpose:test"

Path = tuple[Any, ...]


def minimal_args(tool: str) -> dict[str, Any]:
    """Only required fields."""
    return {
        "engram_memory_search": lambda: make_search_args("deploy pitfalls", PURPOSE),
        "engram_memory_get": lambda: make_get_args(RECORD_ID, PURPOSE),
        "engram_memory_capture": lambda: make_capture_args(KEY, purpose_ref=PURPOSE),
        "engram_memory_request_admission": lambda: make_request_admission_args(CANDIDATE_ID, KEY),
        "engram_memory_withdraw": lambda: make_withdraw_args(CANDIDATE_ID, KEY),
        "engram_memory_forget": lambda: make_forget_args(RECORD_ID, KEY),
    }[tool]()


def full_args(tool: str) -> dict[str, Any]:
    """Every optional field present once (arrays of one item), every string distinct."""
    if tool == "engram_memory_search":
        return make_search_args(
            "deploy pitfalls",
            PURPOSE,
            limit=10,
            max_packet_bytes=65536,
            capability_policy={"minimum_channels": "lexical", "network": "forbid"},
            page_cursor="cursor-token",
        )
    if tool == "engram_memory_get":
        return make_get_args(RECORD_ID, PURPOSE, max_packet_bytes=65536)
    if tool == "engram_memory_capture":
        return make_capture_args(
            KEY,
            purpose_ref=PURPOSE,
            t_end=1_800_000_000_000,
            observed_at="2023-11-14T22:13:20.000Z",
            attestation="attestation-blob",
            retention={"derivative_rule": "retain", "expires_at": FUTURE},
            family_refs=["family:one"],
        )
    return minimal_args(tool)


def get_at(obj: Any, path: Path) -> Any:
    for p in path:
        obj = obj[0 if p == "*" else p]
    return obj


def set_at(obj: Any, path: Path, value: Any) -> None:
    parent = get_at(obj, path[:-1])
    last = path[-1]
    parent[0 if last == "*" else last] = value


def del_at(obj: Any, path: Path) -> None:
    parent = get_at(obj, path[:-1])
    del parent[path[-1]]


def replace_everywhere(obj: Any, old: str, new: Any) -> Any:
    """Replace every string equal to ``old`` (values only) — keeps cross-references consistent."""
    if isinstance(obj, dict):
        return {k: replace_everywhere(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [replace_everywhere(v, old, new) for v in obj]
    if obj == old and type(obj) is str:
        return new
    return obj


def code_of(tool: str, args: Any, now_ms: int = NOW_MS) -> Code | None:
    """None when valid, else the EngramError code."""
    try:
        out = validate_arguments(tool, args, now_ms=now_ms)
    except EngramError as e:
        return e.code
    assert out is args
    return None


def assert_valid(tool: str, args: Any, now_ms: int = NOW_MS) -> None:
    before = copy.deepcopy(args)
    assert code_of(tool, args, now_ms) is None
    assert args == before  # never mutated, no defaults injected


def assert_code(tool: str, args: Any, code: Code, now_ms: int = NOW_MS) -> None:
    assert code_of(tool, args, now_ms) is code


def schema_nodes(schema: dict[str, Any], path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every (path, subschema) in an input schema; array items get the path element '*'."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from schema_nodes(sub, path + (name,))
    if "items" in schema:
        yield from schema_nodes(schema["items"], path + ("*",))


def all_nodes() -> list[tuple[str, Path, dict[str, Any]]]:
    return [(tool, path, sub) for tool, t in TOOLS.items() for path, sub in schema_nodes(t.input_schema)]


def ids(path: Path) -> str:
    return "/".join(str(p) for p in path) or "<root>"


def param_nodes(pred) -> list[Any]:
    return [
        pytest.param(tool, path, sub, id=f"{tool.removeprefix('engram_memory_')}:{ids(path)}")
        for tool, path, sub in all_nodes()
        if pred(path, sub)
    ]


def exact_bytes(n: int) -> str:
    """A string of exactly ``n`` UTF-8 bytes built mostly from 4-byte and 2-byte characters."""
    four, rest = divmod(n, 4)
    s = "😀" * four
    if rest >= 2:
        s += "é"
        rest -= 2
    s += "a" * rest
    assert len(s.encode("utf-8")) == n
    return s
