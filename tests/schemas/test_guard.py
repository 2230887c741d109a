"""Closed schemas, JSON types, host-bound names, NFC, size limit, hostile input (SPEC §1.1, §3)."""

from __future__ import annotations

import collections
import copy
import time

import pytest

from engram_core.canonical import canonicalize
from engram_core.errors import Code
from engram_core.schemas import TOOL_NAMES
from engram_core.schemas.tools import HOST_BOUND_NAMES, MAX_ARGUMENTS_BYTES, TOOLS
from engram_core.schemas.validate import validate_arguments, with_defaults
from engram_hostkit.examples import make_capture_args, make_maximal_capture_args

from .helpers import (
    NOW_MS,
    PURPOSE,
    assert_code,
    assert_valid,
    full_args,
    get_at,
    minimal_args,
    param_nodes,
    set_at,
)

S = Code.INVALID_SCHEMA


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_minimal_and_full_fixtures_are_valid(tool):
    assert_valid(tool, minimal_args(tool))
    assert_valid(tool, full_args(tool))


def test_maximal_capture_fixture_is_valid():
    args = make_maximal_capture_args()
    assert_valid("engram_memory_capture", args)
    p = args["payload"]
    assert len(p["components"]) == 64 and len(p["citations"]) == 256
    assert len(p["components"][0]["citation_ids"]) == 256 and len(args["evidence"]["citation_ids"]) == 256
    assert len(p["reconciliation"]["family_refs"]) == 64
    assert len(args["evidence"]["attestation"].encode()) == 4096


def test_returns_the_same_object_without_defaults():
    args = minimal_args("engram_memory_search")
    assert validate_arguments("engram_memory_search", args, now_ms=NOW_MS) is args
    assert set(args) == {"query", "purpose_ref"}


def test_unknown_tool_is_key_error():
    with pytest.raises(KeyError):
        validate_arguments("engram_memory_admin", {}, now_ms=NOW_MS)
    with pytest.raises(KeyError):
        with_defaults("engram_memory_admin", {})


@pytest.mark.parametrize("tool", TOOL_NAMES)
@pytest.mark.parametrize(
    "arguments", [None, [], "x", 1, True, 1.5, (), b"{}", collections.OrderedDict(), set()], ids=repr
)
def test_arguments_must_be_a_json_object(tool, arguments):
    assert_code(tool, arguments, S)


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_empty_object_misses_required(tool):
    assert_code(tool, {}, S)


# ----------------------------------------------------------------------------- closed objects


@pytest.mark.parametrize("tool,path,sub", param_nodes(lambda p, s: s.get("type") == "object"))
def test_unknown_field_at_every_object_level(tool, path, sub):
    args = full_args(tool)
    get_at(args, path)["x_unknown"] = "value"
    assert_code(tool, args, S)


@pytest.mark.parametrize("name", sorted(HOST_BOUND_NAMES))
@pytest.mark.parametrize("tool,path,sub", param_nodes(lambda p, s: s.get("type") == "object"))
def test_host_bound_names_rejected_at_every_level(tool, path, sub, name):
    args = full_args(tool)
    get_at(args, path)[name] = True if name == "confirmed" else "value"
    assert_code(tool, args, S)


@pytest.mark.parametrize("name", sorted(HOST_BOUND_NAMES))
def test_host_bound_name_inside_an_unexpected_nested_value(name):
    args = full_args("engram_memory_search")
    args["capability_policy"] = {"minimum_channels": "lexical", "network": "forbid", name: {"x": 1}}
    assert_code("engram_memory_search", args, S)
    args = full_args("engram_memory_capture")
    args["payload"]["citations"][0]["locator"][name] = "t"
    assert_code("engram_memory_capture", args, S)


@pytest.mark.parametrize("tool,path,sub", param_nodes(lambda p, s: len(p) > 0))
def test_null_anywhere_is_invalid(tool, path, sub):
    args = full_args(tool)
    set_at(args, path, None)
    assert_code(tool, args, S)


@pytest.mark.parametrize("tool,path,sub", param_nodes(lambda p, s: len(p) > 0 and p[-1] != "*"))
def test_every_required_field_is_required(tool, path, sub):
    parent_path = path[:-1]
    parent_schema = TOOLS[tool].input_schema
    for p in parent_path:
        parent_schema = parent_schema["items"] if p == "*" else parent_schema["properties"][p]
    args = full_args(tool)
    del get_at(args, parent_path)[path[-1]]
    if path[-1] in parent_schema["required"]:
        assert_code(tool, args, S)
    else:
        # optional fields may be omitted (never null)
        assert_valid(tool, args)


# ----------------------------------------------------------------------------- JSON types


@pytest.mark.parametrize(
    "value",
    [1.0, 10.0, float("nan"), float("inf"), -0.0, b"bytes", ("t",), {"set"}, object(), 1j],
    ids=repr,
)
@pytest.mark.parametrize(
    "tool,field",
    [
        ("engram_memory_search", "limit"),
        ("engram_memory_search", "query"),
        ("engram_memory_get", "max_packet_bytes"),
        ("engram_memory_forget", "reason_ref"),
    ],
)
def test_non_json_or_float_values_rejected(tool, field, value):
    args = full_args(tool)
    args[field] = value
    assert_code(tool, args, S)


@pytest.mark.parametrize("path", [("limit",), ("max_packet_bytes",)])
@pytest.mark.parametrize("value", [True, False, "10", 10.0, [10], {"v": 10}], ids=repr)
def test_integer_fields_take_only_json_integers(path, value):
    args = full_args("engram_memory_search")
    set_at(args, path, value)
    assert_code("engram_memory_search", args, S)


@pytest.mark.parametrize(
    "path",
    [("payload", "valid_time", "t"), ("payload", "primary_event", "at"), ("payload", "schema_version")],
)
@pytest.mark.parametrize("value", [True, 2.0, "2", 1_700_000_000_000.0], ids=repr)
def test_capture_integer_fields_take_only_json_integers(path, value):
    args = make_capture_args(purpose_ref=PURPOSE)
    set_at(args, path, value)
    assert_code("engram_memory_capture", args, S)


@pytest.mark.parametrize("value", [1, 0, True, None, ["q"], {"q": "q"}], ids=repr)
def test_strings_and_booleans_are_not_interchangeable(value):
    args = full_args("engram_memory_search")
    args["query"] = value
    assert_code("engram_memory_search", args, S)


@pytest.mark.parametrize("key", [1, None, 1.5, ("query",), b"query", True])
def test_non_string_keys(key):
    args = full_args("engram_memory_search")
    args[key] = "x"
    assert_code("engram_memory_search", args, S)
    args = full_args("engram_memory_capture")
    args["payload"]["valid_time"][key] = 1
    assert_code("engram_memory_capture", args, S)


@pytest.mark.parametrize("huge", [2**53, -(2**53), 10**400, -(10**100_000)], ids=["2^53", "-2^53", "1e400", "-1e100000"])
@pytest.mark.parametrize("tool,path", [("engram_memory_search", ("limit",)), ("engram_memory_capture", ("payload", "valid_time", "t")), ("engram_memory_search", ("query",))])
def test_huge_integers_never_crash(tool, path, huge):
    args = full_args(tool)
    set_at(args, path, huge)
    assert_code(tool, args, S)


# ----------------------------------------------------------------------------- strings: NFC, surrogates

NON_NFC = ["e\u0301", "A\u030a", "\u212b", "x\u0344", "\u1100\u1161"]


@pytest.mark.parametrize("bad", NON_NFC, ids=ascii)
@pytest.mark.parametrize("tool,path,sub", param_nodes(lambda p, s: s.get("type") == "string" and "pattern" not in s and "enum" not in s))
def test_non_nfc_strings_rejected_everywhere(tool, path, sub, bad):
    args = full_args(tool)
    value = get_at(args, path)
    new = value + bad
    if tool == "engram_memory_capture":
        from .helpers import replace_everywhere

        args = replace_everywhere(args, value, new)
    else:
        set_at(args, path, new)
    assert_code(tool, args, S)


@pytest.mark.parametrize("good", ["\u00e9", "\u00c5", "\uac00", "caf\u00e9 😀"], ids=ascii)
def test_nfc_composed_strings_pass(good):
    args = full_args("engram_memory_search")
    args["query"] = good
    args["purpose_ref"] = PURPOSE + good
    assert_valid("engram_memory_search", args)


@pytest.mark.parametrize("bad", NON_NFC, ids=ascii)
def test_non_nfc_keys_and_digest_values_are_schema_errors(bad):
    args = full_args("engram_memory_search")
    args["query" + bad] = "x"
    assert_code("engram_memory_search", args, S)
    args = make_capture_args(purpose_ref=PURPOSE)
    args["evidence"]["evidence_digest"] = "sha256:" + "a" * 63 + bad
    assert_code("engram_memory_capture", args, S)


@pytest.mark.parametrize("bad", ["\ud800", "a\udfffb", "\udc00\ud800"], ids=ascii)
def test_lone_surrogates_never_crash(bad):
    args = full_args("engram_memory_search")
    args["query"] = bad
    assert_code("engram_memory_search", args, S)
    args = full_args("engram_memory_search")
    args[bad] = "x"
    assert_code("engram_memory_search", args, S)
    args = make_capture_args(purpose_ref=PURPOSE)
    args["payload"]["components"][0]["text"] = "ok " + bad
    assert_code("engram_memory_capture", args, S)


# ----------------------------------------------------------------------------- size and hostile shapes


def _sized_capture(total: int, filler: str = "a") -> dict:
    """A valid capture whose canonical serialisation is exactly ``total`` bytes."""
    args = make_capture_args(purpose_ref=PURPOSE)
    comps = args["payload"]["components"]
    for i in range(17):  # 17 texts of up to 65536 bytes reach past 1 MiB
        comps.append({"component_id": f"c{i:02d}", "kind": "context", "text": "a", "citation_ids": ["cite-1"]})
    remaining = total - len(canonicalize(args))
    for comp in comps[1:]:
        grow = min(remaining, 65535)
        comp["text"] = "a" * (1 + grow)
        remaining -= grow
    assert remaining == 0
    if filler != "a":
        # swap one-byte characters for the same number of bytes of a multi-byte one
        t = comps[1]["text"]
        comps[1]["text"] = filler + t[len(filler.encode()):]
    assert len(canonicalize(args)) == total
    return args


@pytest.mark.parametrize("filler", ["a", "é", "😀"])
def test_serialised_size_exactly_at_limit_passes(filler):
    args = _sized_capture(MAX_ARGUMENTS_BYTES, filler)
    assert_valid("engram_memory_capture", args)


@pytest.mark.parametrize("filler", ["a", "é", "😀"])
def test_serialised_size_one_past_limit_fails(filler):
    args = _sized_capture(MAX_ARGUMENTS_BYTES + 1, filler)
    assert_code("engram_memory_capture", args, S)


def test_size_counts_bytes_not_characters():
    args = _sized_capture(MAX_ARGUMENTS_BYTES)
    text = args["payload"]["components"][1]["text"]
    # one 'a' (1 byte) replaced by one 'é' (2 bytes): same characters, one byte past the limit
    args["payload"]["components"][1]["text"] = "é" + text[1:]
    assert_code("engram_memory_capture", args, S)


def test_size_counts_the_canonical_escaping():
    args = _sized_capture(MAX_ARGUMENTS_BYTES)
    text = args["payload"]["components"][1]["text"]
    # a control character serialises as \u0001 (6 bytes)
    args["payload"]["components"][1]["text"] = "\u0001" + text[6:]
    assert_valid("engram_memory_capture", args)
    args["payload"]["components"][1]["text"] = "\u0001" + text[5:]
    assert_code("engram_memory_capture", args, S)


@pytest.mark.parametrize(
    "make",
    [
        lambda: "a" * 50_000_000,
        lambda: "😀" * 2_000_000,
        lambda: list(range(5_000_000)),
        lambda: {f"k{i}": i for i in range(1_000_000)},
        lambda: [[]] * 3_000_000,
    ],
    ids=["50MB-str", "8MB-emoji", "5M-ints", "1M-keys", "3M-lists"],
)
def test_huge_inputs_rejected_quickly(make):
    value = make()
    args = full_args("engram_memory_search")
    args["query"] = value
    start = time.monotonic()
    assert_code("engram_memory_search", args, S)
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("depth", [10, 1000, 200_000])
def test_deep_nesting_never_crashes(depth):
    deep: object = "x"
    for _ in range(depth):
        deep = [deep]
    args = full_args("engram_memory_search")
    args["query"] = deep
    assert_code("engram_memory_search", args, S)
    deep_obj: object = {}
    for _ in range(depth):
        deep_obj = {"a": deep_obj}
    args = full_args("engram_memory_capture")
    args["payload"]["valid_time"]["x"] = deep_obj
    assert_code("engram_memory_capture", args, S)


def test_shared_substructure_and_cycles_never_crash():
    args = full_args("engram_memory_search")
    cyc: list = []
    cyc.append(cyc)
    args["query"] = cyc
    assert_code("engram_memory_search", args, S)
    d: dict = {}
    d["d"] = d
    assert_code("engram_memory_search", d, S)


def test_dict_and_list_subclasses_are_not_json():
    class D(dict):
        pass

    args = D(full_args("engram_memory_search"))
    assert_code("engram_memory_search", args, S)
    args = full_args("engram_memory_capture")
    args["payload"]["components"] = collections.UserList(args["payload"]["components"])
    assert_code("engram_memory_capture", args, S)


# ----------------------------------------------------------------------------- with_defaults


def test_with_defaults_search_get_capture():
    s = with_defaults("engram_memory_search", {"query": "q", "purpose_ref": PURPOSE})
    assert s == {
        "query": "q",
        "purpose_ref": PURPOSE,
        "limit": 10,
        "max_packet_bytes": 65536,
        "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
    }
    given = {"query": "q", "purpose_ref": PURPOSE, "limit": 3, "capability_policy": {"minimum_channels": "lexical_and_semantic", "network": "allow"}}
    before = copy.deepcopy(given)
    out = with_defaults("engram_memory_search", given)
    assert given == before and out["limit"] == 3 and out["max_packet_bytes"] == 65536
    assert out["capability_policy"] == before["capability_policy"]
    assert with_defaults("engram_memory_get", {"record_id": "mem_a", "purpose_ref": PURPOSE})["max_packet_bytes"] == 65536
    cap = make_capture_args(purpose_ref=PURPOSE)
    eff = with_defaults("engram_memory_capture", cap)
    assert eff["payload"]["retention"] == {"derivative_rule": "make-ineligible"} and "retention" not in cap["payload"]
    kept = make_capture_args(purpose_ref=PURPOSE, retention={"derivative_rule": "retain"})
    assert with_defaults("engram_memory_capture", kept)["payload"]["retention"] == {"derivative_rule": "retain"}
    w = minimal_args("engram_memory_withdraw")
    assert with_defaults("engram_memory_withdraw", w) == w


def test_with_defaults_result_validates_too():
    for tool in TOOL_NAMES:
        assert_valid(tool, with_defaults(tool, minimal_args(tool)))


def test_hostile_now_ms_is_a_programming_error():
    with pytest.raises(TypeError):
        validate_arguments("engram_memory_search", full_args("engram_memory_search"), now_ms=1.5)  # type: ignore[arg-type]


def test_package_exports_the_validator():
    from engram_core import schemas

    assert schemas.validate_arguments is validate_arguments
    assert schemas.with_defaults is with_defaults


def test_maximal_capture_validates_fast_enough():
    args = make_maximal_capture_args()
    start = time.monotonic()
    for _ in range(5):
        validate_arguments("engram_memory_capture", args, now_ms=NOW_MS)
    assert (time.monotonic() - start) / 5 < 0.5
