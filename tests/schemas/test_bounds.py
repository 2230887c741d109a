"""Every bound of SPEC §3/§5, on both sides of the limit, asserting the error code.

Byte bounds use multi-byte characters ('é' = 2 bytes, '😀' = 4 bytes) to show that UTF-8 bytes,
not characters, are counted. The byte-bound, integer, enum and const cases are derived from the
published schemas themselves, so a bound added to a schema is tested automatically.
"""

from __future__ import annotations

import pytest

from engram_core.errors import Code
from engram_core.schemas.tools import SAFE_INT
from engram_hostkit.examples import content_digest_of, make_capture_args

from .helpers import (
    CANDIDATE_ID,
    FUTURE,
    PURPOSE,
    RECORD_ID,
    assert_code,
    assert_valid,
    exact_bytes,
    full_args,
    get_at,
    param_nodes,
    replace_everywhere,
    set_at,
)

S = Code.INVALID_SCHEMA
CAPTURE = "engram_memory_capture"


def _with_value(tool, path, value):
    args = full_args(tool)
    if tool == CAPTURE:
        # keep cross-references consistent: rename the value wherever it occurs
        return replace_everywhere(args, get_at(args, path), value)
    set_at(args, path, value)
    return args


def _sized(sub, n):
    """A value of exactly n UTF-8 bytes that satisfies the node's pattern, if any."""
    if "pattern" in sub:
        prefix = "mem_" if "mem_" in sub["pattern"] else "cand_"
        return prefix + "a" * (n - len(prefix))
    return exact_bytes(n)


BYTE_NODES = param_nodes(lambda p, s: "x-engram-maxBytes" in s)
MIN_BYTE_NODES = param_nodes(lambda p, s: "x-engram-minBytes" in s)


@pytest.mark.parametrize("tool,path,sub", BYTE_NODES)
def test_max_bytes_exactly_at_limit_passes(tool, path, sub):
    assert_valid(tool, _with_value(tool, path, _sized(sub, sub["x-engram-maxBytes"])))


@pytest.mark.parametrize("tool,path,sub", BYTE_NODES)
def test_max_bytes_one_past_limit_fails(tool, path, sub):
    assert_code(tool, _with_value(tool, path, _sized(sub, sub["x-engram-maxBytes"] + 1)), S)


@pytest.mark.parametrize("tool,path,sub", param_nodes(lambda p, s: "x-engram-maxBytes" in s and "pattern" not in s))
def test_max_bytes_counts_bytes_not_characters(tool, path, sub):
    hi = sub["x-engram-maxBytes"]
    # hi/2 two-byte characters: exactly at the byte limit
    assert_valid(tool, _with_value(tool, path, "é" * (hi // 2)))
    # one more 'é': still far below maxLength in code points, but 2 bytes past the byte bound
    over = "é" * (hi // 2 + 1)
    assert len(over) <= sub["maxLength"]
    assert_code(tool, _with_value(tool, path, over), S)
    # hi/4 four-byte characters pass; one more fails
    assert_valid(tool, _with_value(tool, path, "😀" * (hi // 4)))
    assert_code(tool, _with_value(tool, path, "😀" * (hi // 4) + "a"), S)


@pytest.mark.parametrize("tool,path,sub", MIN_BYTE_NODES)
def test_min_bytes_exactly_at_limit_passes(tool, path, sub):
    lo = sub["x-engram-minBytes"]
    assert_valid(tool, _with_value(tool, path, exact_bytes(lo)))
    assert_valid(tool, _with_value(tool, path, "a" * lo))


@pytest.mark.parametrize("tool,path,sub", MIN_BYTE_NODES)
def test_min_bytes_one_below_limit_fails(tool, path, sub):
    lo = sub["x-engram-minBytes"]
    assert_code(tool, _with_value(tool, path, exact_bytes(lo - 1)), S)
    assert_code(tool, _with_value(tool, path, "a" * (lo - 1)), S)


@pytest.mark.parametrize("tool", ["engram_memory_capture", "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"])
@pytest.mark.parametrize(
    "key,ok",
    [
        ("😀" * 4, True),  # 4 characters, 16 bytes (the published minLength is 4)
        ("é" * 8, True),  # 8 characters, 16 bytes
        ("a" * 16, True),
        ("é" * 7 + "a", False),  # 8 characters, 15 bytes
        ("😀" * 3 + "éa", False),  # 5 characters, 15 bytes
        ("a" * 15, False),
        ("é" * 128, True),  # 256 bytes
        ("é" * 128 + "a", False),  # 257 bytes
        ("😀" * 64, True),
        ("a" * 256, True),
        ("a" * 257, False),
        ("", False),
    ],
    ids=lambda v: f"{len(v.encode())}B/{len(v)}ch" if isinstance(v, str) else str(v),
)
def test_idempotency_key_bytes(tool, key, ok):
    args = full_args(tool)
    args["idempotency_key"] = key
    if ok:
        assert_valid(tool, args)
    else:
        assert_code(tool, args, S)


# ----------------------------------------------------------------------------- integers


def _fixup(tool, path, args, value):
    if path == ("payload", "valid_time", "t"):
        args["payload"]["valid_time"].pop("t_end", None)
    if path == ("payload", "valid_time", "t_end"):
        args["payload"]["valid_time"]["t"] = -SAFE_INT


INT_NODES = param_nodes(lambda p, s: s.get("type") == "integer" and "minimum" in s)


@pytest.mark.parametrize("tool,path,sub", INT_NODES)
@pytest.mark.parametrize("side", ["minimum", "maximum"])
def test_integer_bounds(tool, path, sub, side):
    limit = sub[side]
    past = limit - 1 if side == "minimum" else limit + 1
    for value, ok in ((limit, True), (past, False)):
        args = full_args(tool)
        set_at(args, path, value)
        _fixup(tool, path, args, value)
        if ok:
            assert_valid(tool, args)
        else:
            assert_code(tool, args, S)


@pytest.mark.parametrize(
    "field,lo,hi",
    [("limit", 1, 50), ("max_packet_bytes", 4096, 1_048_576)],
)
def test_search_integer_bounds_are_the_spec_numbers(field, lo, hi):
    for value, ok in ((lo, True), (hi, True), (lo - 1, False), (hi + 1, False), (0, False), (-1, False)):
        args = full_args("engram_memory_search")
        args[field] = value
        if ok:
            assert_valid("engram_memory_search", args)
        else:
            assert_code("engram_memory_search", args, S)


@pytest.mark.parametrize("path", [("payload", "valid_time", "t"), ("payload", "primary_event", "at")])
@pytest.mark.parametrize("value,ok", [(SAFE_INT, True), (-SAFE_INT, True), (0, True), (SAFE_INT + 1, False), (-SAFE_INT - 1, False)])
def test_epoch_values_are_safe_integers(path, value, ok):
    args = make_capture_args(purpose_ref=PURPOSE)
    set_at(args, path, value)
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


@pytest.mark.parametrize("t,t_end,ok", [(5, 5, True), (5, 6, True), (5, 4, False), (-SAFE_INT, SAFE_INT, True), (SAFE_INT, -SAFE_INT, False), (0, -1, False)])
def test_t_end_not_before_t(t, t_end, ok):
    args = make_capture_args(purpose_ref=PURPOSE, t=t, t_end=t_end)
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


# ----------------------------------------------------------------------------- enums and consts

ENUM_NODES = param_nodes(lambda p, s: "enum" in s)


@pytest.mark.parametrize("tool,path,sub", ENUM_NODES)
def test_enum_members_pass_and_others_fail(tool, path, sub):
    for member in sub["enum"]:
        args = full_args(tool)
        set_at(args, path, member)
        assert_valid(tool, args)
    for bad in [sub["enum"][0].upper(), sub["enum"][0] + " ", "x" + sub["enum"][0], "", 0, True]:
        args = full_args(tool)
        set_at(args, path, bad)
        assert_code(tool, args, S)


CONST_NODES = param_nodes(lambda p, s: "const" in s)


@pytest.mark.parametrize("tool,path,sub", CONST_NODES)
def test_const(tool, path, sub):
    args = full_args(tool)
    set_at(args, path, sub["const"])
    assert_valid(tool, args)
    for bad in [sub["const"] - 1, sub["const"] + 1, str(sub["const"]), True, False, 0]:
        args = full_args(tool)
        set_at(args, path, bad)
        assert_code(tool, args, S)


def test_schema_version_is_two():
    assert get_at(full_args(CAPTURE), ("payload", "schema_version")) == 2
    args = full_args(CAPTURE)
    args["payload"]["schema_version"] = 1
    assert_code(CAPTURE, args, S)


@pytest.mark.parametrize(
    "policy,ok",
    [
        ({"minimum_channels": "lexical", "network": "forbid"}, True),
        ({"minimum_channels": "lexical_and_semantic", "network": "allow"}, True),
        ({"minimum_channels": "lexical"}, False),
        ({"network": "forbid"}, False),
        ({}, False),
        ({"minimum_channels": "semantic", "network": "forbid"}, False),
        ({"minimum_channels": "lexical", "network": "forbid", "x": 1}, False),
        ("lexical", False),
        ([], False),
    ],
    ids=repr,
)
def test_capability_policy_closed_both_required(policy, ok):
    args = full_args("engram_memory_search")
    args["capability_policy"] = policy
    if ok:
        assert_valid("engram_memory_search", args)
    else:
        assert_code("engram_memory_search", args, S)


# ----------------------------------------------------------------------------- patterns

RECORD_IDS = [
    ("mem_a", True),
    ("mem_" + "a" * 52, True),
    ("mem_abcdefghijklmnopqrstuvwxyz234567", True),
    ("mem_", False),
    ("mem", False),
    ("MEM_abc", False),
    ("mem_ABC", False),
    ("mem_abc1", False),
    ("mem_abc8", False),
    ("mem_abc=", False),
    ("mem_abc\n", False),  # Python's '$' alone would accept a trailing newline
    ("\nmem_abc", False),
    ("mem_abc ", False),
    (" mem_abc", False),
    ("xmem_abc", False),
    ("cand_abc", False),
    ("mem_ab-c", False),
    ("mem_\u00e9", False),
    ("mem_" + "a" * 508, True),  # 512 bytes
    ("mem_" + "a" * 509, False),
]
CANDIDATE_IDS = [
    ("cand_a", True),
    ("cand_" + "b" * 52, True),
    ("cand_", False),
    ("CAND_abc", False),
    ("cand_ABC", False),
    ("cand_abc0", False),
    ("cand_abc\n", False),
    ("mem_abc", False),
    ("cand_abc ", False),
    ("xcand_abc", False),
    ("cand_" + "a" * 507, True),
    ("cand_" + "a" * 508, False),
]


@pytest.mark.parametrize("tool", ["engram_memory_get", "engram_memory_forget"])
@pytest.mark.parametrize("value,ok", RECORD_IDS, ids=ascii)
def test_record_id_pattern(tool, value, ok):
    args = full_args(tool)
    args["record_id"] = value
    if ok:
        assert_valid(tool, args)
    else:
        assert_code(tool, args, S)


@pytest.mark.parametrize("tool", ["engram_memory_request_admission", "engram_memory_withdraw"])
@pytest.mark.parametrize("value,ok", CANDIDATE_IDS, ids=ascii)
def test_candidate_id_pattern(tool, value, ok):
    args = full_args(tool)
    args["candidate_id"] = value
    if ok:
        assert_valid(tool, args)
    else:
        assert_code(tool, args, S)


def test_ids_are_not_interchangeable():
    args = full_args("engram_memory_get")
    args["record_id"] = CANDIDATE_ID
    assert_code("engram_memory_get", args, S)
    args = full_args("engram_memory_withdraw")
    args["candidate_id"] = RECORD_ID
    assert_code("engram_memory_withdraw", args, S)


@pytest.mark.parametrize("value,ok", [("x", True), ("😀" * 1024, True), ("😀" * 1024 + "a", False), ("", False)], ids=lambda v: ascii(v)[:20])
def test_page_cursor_bounds(value, ok):
    args = full_args("engram_memory_search")
    args["page_cursor"] = value
    if ok:
        assert_valid("engram_memory_search", args)
    else:
        assert_code("engram_memory_search", args, S)


# ----------------------------------------------------------------------------- instants

INSTANTS = [
    ("2028-02-29T00:00:00.000Z", True),  # leap year
    ("2030-12-31T23:59:59.999Z", True),
    ("2031-01-01T00:00:00.000Z", True),
    ("2029-02-29T00:00:00.000Z", False),  # not a leap year
    ("2100-02-29T00:00:00.000Z", False),  # century, not a leap year
    ("2030-04-31T00:00:00.000Z", False),
    ("2030-13-01T00:00:00.000Z", False),
    ("2030-00-01T00:00:00.000Z", False),
    ("2030-01-00T00:00:00.000Z", False),
    ("2030-01-01T24:00:00.000Z", False),
    ("2030-01-01T00:60:00.000Z", False),
    ("2030-06-30T23:59:60.000Z", False),  # no leap seconds
    ("2030-01-01T00:00:00Z", False),
    ("2030-01-01T00:00:00.00Z", False),
    ("2030-01-01T00:00:00.0000Z", False),
    ("2030-01-01T00:00:00.000z", False),
    ("2030-01-01t00:00:00.000Z", False),
    ("2030-01-01 00:00:00.000Z", False),
    ("2030-01-01T00:00:00.000+00:00", False),
    ("2030-01-01T00:00:00.000", False),
    ("2030-01-01T00:00:00.000Z\n", False),
    (" 2030-01-01T00:00:00.000Z", False),
    ("+2030-01-01T00:00:00.000Z", False),
    ("2030-1-01T00:00:00.000Z", False),
    ("２０３０-01-01T00:00:00.000Z", False),  # full-width digits
    ("", False),
]


@pytest.mark.parametrize("value,ok", INSTANTS, ids=ascii)
@pytest.mark.parametrize("where", ["observed_at", "expires_at"])
def test_instants_strict_and_calendar_valid(where, value, ok):
    if where == "observed_at":
        args = make_capture_args(purpose_ref=PURPOSE, observed_at=value)
    else:
        args = make_capture_args(purpose_ref=PURPOSE, retention={"derivative_rule": "make-ineligible", "expires_at": value})
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


def test_observed_at_may_be_in_the_past_or_future():
    for v in ["1970-01-01T00:00:00.000Z", "0001-01-01T00:00:00.000Z", FUTURE]:
        assert_valid(CAPTURE, make_capture_args(purpose_ref=PURPOSE, observed_at=v))


# ----------------------------------------------------------------------------- arrays


def _capture_with_components(n: int) -> dict:
    args = make_capture_args(purpose_ref=PURPOSE)
    first = args["payload"]["components"][0]
    args["payload"]["components"] = [first] + [
        {"component_id": f"extra-{i}", "kind": "context", "text": f"t{i}", "citation_ids": ["cite-1"]} for i in range(n - 1)
    ]
    return args


def _citations(n: int) -> list[dict]:
    return [
        {
            "citation_id": "cite-1" if i == 0 else f"cite-x{i}",
            "source_ref": f"doc:{i}",
            "locator": {"scheme": "line", "value": str(i)},
            "content_digest": content_digest_of(str(i)),
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("n,ok", [(1, True), (64, True), (65, False)])
def test_components_count(n, ok):
    args = _capture_with_components(n)
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


def test_components_empty():
    args = make_capture_args(purpose_ref=PURPOSE)
    args["payload"]["components"] = []
    assert_code(CAPTURE, args, S)


@pytest.mark.parametrize("n,ok", [(1, True), (256, True), (257, False)])
def test_citations_count(n, ok):
    args = make_capture_args(purpose_ref=PURPOSE)
    args["payload"]["citations"] = _citations(n)
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


def test_citations_empty():
    args = make_capture_args(purpose_ref=PURPOSE)
    args["payload"]["citations"] = []
    assert_code(CAPTURE, args, S)


@pytest.mark.parametrize("where", ["component", "evidence"])
@pytest.mark.parametrize("n,ok", [(1, True), (256, True), (257, False), (0, False)])
def test_citation_ids_count(where, n, ok):
    args = make_capture_args(purpose_ref=PURPOSE)
    cits = _citations(max(n, 256))
    args["payload"]["citations"] = cits[:256]
    id_list = [c["citation_id"] for c in cits[:n]]
    if n == 257:
        id_list[-1] = "cite-x256"  # unique; the 257th id cannot resolve without a 257th citation
    if where == "component":
        args["payload"]["components"][0]["citation_ids"] = id_list
    else:
        args["evidence"]["citation_ids"] = id_list
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


def test_citation_ids_257_fails_on_max_items_alone():
    """Structural check only (the cross-reference would also fail): maxItems is in the schema."""
    from engram_core.schemas.validate import _VALIDATORS

    args = make_capture_args(purpose_ref=PURPOSE)
    args["payload"]["citations"] = _citations(256)
    args["payload"]["components"][0]["citation_ids"] = [c["citation_id"] for c in _citations(256)] + ["cite-x256"]
    keywords = {e.validator for e in _VALIDATORS[CAPTURE].iter_errors(args)}
    assert keywords == {"maxItems"}


@pytest.mark.parametrize("where", ["component", "evidence"])
def test_citation_ids_unique(where):
    args = make_capture_args(purpose_ref=PURPOSE)
    if where == "component":
        args["payload"]["components"][0]["citation_ids"] = ["cite-1", "cite-1"]
    else:
        args["evidence"]["citation_ids"] = ["cite-1", "cite-1"]
    assert_code(CAPTURE, args, S)


def _family(refs):
    return make_capture_args(purpose_ref=PURPOSE, family_refs=refs)


@pytest.mark.parametrize(
    "refs,ok",
    [
        (["a"], True),
        (["a", "b"], True),
        ([f"f{i:02d}" for i in range(64)], True),
        ([f"f{i:02d}" for i in range(65)], False),
        ([], False),
        (["b", "a"], False),
        (["a", "a"], False),
        (["a", "b", "b"], False),
        (["a", "c", "b"], False),
        (["B", "a"], True),  # code point order: uppercase before lowercase
        (["a", "B"], False),
        (["a", "aa"], True),
        (["aa", "a"], False),
        (["z", "é"], True),  # U+007A < U+00E9
        (["\ue000", "😀"], True),  # code point order (U+E000 < U+1F600); UTF-16 order would be the reverse
        (["😀", "\ue000"], False),
        (["", "a"], False),
        (["a", 1], False),
    ],
    ids=ascii,
)
def test_family_refs(refs, ok):
    args = _family(refs)
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


def test_reconciliation_requires_family_refs():
    args = _family(["a"])
    args["payload"]["reconciliation"] = {}
    assert_code(CAPTURE, args, S)


@pytest.mark.parametrize(
    "retention,ok",
    [
        ({"derivative_rule": "retain"}, True),
        ({"derivative_rule": "make-ineligible"}, True),
        ({"derivative_rule": "retain", "expires_at": FUTURE}, True),
        ({"expires_at": FUTURE}, False),
        ({}, False),
        ({"derivative_rule": "make_ineligible"}, False),
        ({"derivative_rule": "retain", "ttl": 5}, False),
    ],
    ids=repr,
)
def test_retention_shape(retention, ok):
    args = make_capture_args(purpose_ref=PURPOSE, retention=retention)
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


@pytest.mark.parametrize("n,ok", [(1, True), (4096, True), (4097, False)])
def test_attestation_bytes(n, ok):
    args = make_capture_args(purpose_ref=PURPOSE, attestation=exact_bytes(n))
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)
    if n > 1:
        # the same number of characters as 'é' doubles the bytes
        args = make_capture_args(purpose_ref=PURPOSE, attestation="é" * n)
        assert_code(CAPTURE, args, S)


def test_attestation_empty_is_invalid():
    assert_code(CAPTURE, make_capture_args(purpose_ref=PURPOSE, attestation=""), S)
