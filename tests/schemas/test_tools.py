"""The tool definitions: names, annotations, gate metadata, closed schemas, envelope schemas."""

from __future__ import annotations

import dataclasses
import math

import mcp.types as mcp_types
import pytest
from jsonschema import Draft202012Validator

from engram_core.errors import Code
from engram_core.schemas import TOOL_NAMES, TOOLS, ToolDef
from engram_core.schemas.tools import HOST_BOUND_NAMES

from .helpers import schema_nodes

D = "sha256:" + "0" * 64
CURSOR = "42"
RID = "mem_" + "a" * 52
CID = "cand_" + "b" * 52


def test_tool_names_are_the_six_in_order():
    assert TOOL_NAMES == (
        "engram_memory_search",
        "engram_memory_get",
        "engram_memory_capture",
        "engram_memory_request_admission",
        "engram_memory_withdraw",
        "engram_memory_forget",
    )
    assert tuple(TOOLS) == TOOL_NAMES
    assert all(isinstance(t, ToolDef) and TOOLS[n].name == n for n, t in TOOLS.items())


def test_tooldef_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TOOLS["engram_memory_get"].name = "x"  # type: ignore[misc]


EXPECTED_META = {
    # name: (readOnly, destructive, mutation, confirmation_always, target_field)
    "engram_memory_search": (True, False, False, False, None),
    "engram_memory_get": (True, False, False, False, "record_id"),
    "engram_memory_capture": (False, False, True, False, None),
    "engram_memory_request_admission": (False, False, True, False, "candidate_id"),
    "engram_memory_withdraw": (False, True, True, True, "candidate_id"),
    "engram_memory_forget": (False, True, True, True, "record_id"),
}


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_annotations_and_gate_metadata(name):
    t = TOOLS[name]
    ro, destructive, mutation, confirm, target = EXPECTED_META[name]
    assert t.annotations == {
        "readOnlyHint": ro,
        "destructiveHint": destructive,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert (t.mutation, t.confirmation_always, t.target_field) == (mutation, confirm, target)
    if target is not None:
        assert target in t.input_schema["required"]
    assert t.title and t.description and len(t.description) < 2000


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_schemas_are_valid_draft_2020_12_and_mcp_tools(name):
    t = TOOLS[name]
    Draft202012Validator.check_schema(t.input_schema)
    Draft202012Validator.check_schema(t.output_schema)
    assert t.input_schema["type"] == "object" and t.output_schema["type"] == "object"
    mcp_types.Tool(
        name=t.name,
        title=t.title,
        description=t.description,
        inputSchema=t.input_schema,
        outputSchema=t.output_schema,
        annotations=mcp_types.ToolAnnotations(**t.annotations),
    )


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_input_object_is_closed_and_no_host_bound_property(name):
    for path, sub in schema_nodes(TOOLS[name].input_schema):
        if sub.get("type") == "object":
            assert sub["additionalProperties"] is False, path
            assert set(sub["required"]) <= set(sub["properties"]), path
            assert not (set(sub["properties"]) & HOST_BOUND_NAMES), path
        assert "null" not in str(sub.get("type")), path


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_input_string_has_a_bound_or_exact_shape(name):
    for path, sub in schema_nodes(TOOLS[name].input_schema):
        if sub.get("type") == "string":
            assert "x-engram-maxBytes" in sub or "pattern" in sub or "enum" in sub, path
            if "x-engram-maxBytes" in sub:
                # maxLength (code points) is the byte bound: loose, never stricter.
                assert sub["maxLength"] == sub["x-engram-maxBytes"], path
            if "x-engram-minBytes" in sub:
                # the smallest code point count that can reach the byte minimum (4-byte chars)
                assert sub["minLength"] == math.ceil(sub["x-engram-minBytes"] / 4), path
                assert sub["x-engram-maxBytes"] >= sub["x-engram-minBytes"], path


def test_published_defaults():
    s = TOOLS["engram_memory_search"].input_schema["properties"]
    assert s["limit"]["default"] == 10 and s["max_packet_bytes"]["default"] == 65536
    g = TOOLS["engram_memory_get"].input_schema["properties"]
    assert g["max_packet_bytes"]["default"] == 65536


# ----------------------------------------------------------------------------- output schemas

PACKET = {
    "record": {"record_id": RID, "record_digest": D, "components": []},
    "redacted_fields": ["/trust"],
    "redaction_receipt_digest": D,
    "score": 0.5,
    "rank": 1,
}
RECEIPT = {
    "event_id": "evt-1",
    "cursor": CURSOR,
    "event_digest": D,
    "authorization_receipt_digest": D,
    "transaction_receipt_digest": D,
}
GOOD_VALUES = {
    "engram_memory_search": {
        "records": [PACKET],
        "rank_receipt": {"receipt_digest": D, "profile": "engram-hybrid/v2"},
        "next_page_cursor": "opaque",
        "response_digest": D,
    },
    "engram_memory_get": {
        "record": {"record_id": RID},
        "redacted_fields": [],
        "redaction_receipt_digest": D,
        "read_receipt": {
            "record_id": RID,
            "record_digest": D,
            "valid_as_of": 1_700_000_000_000,
            "system_as_of": "7",
            "validated_through_cursor": "7",
            "authorization_receipt_digest": D,
            "revalidation_receipt_digest": D,
            "checked_at": "2026-01-01T00:00:00.000Z",
            "receipt_digest": D,
        },
        "packet_digest": D,
    },
    "engram_memory_capture": {
        "status": "committed_pending",
        "candidate_id": CID,
        "record_digest": D,
        "cursor": "0",
        "transaction_receipt_digest": D,
    },
    "engram_memory_request_admission": {
        "outcome": {
            "status": "accepted",
            "candidate_id": CID,
            "record_id": RID,
            "cursor": "3",
            "decision_receipt_digest": D,
            "transaction_receipt_digest": D,
        },
        "replayed": False,
    },
    "engram_memory_withdraw": {
        "receipt": {**RECEIPT, "operation": "withdraw", "from_state": "pending", "to_state": "withdrawn"},
        "replayed": False,
        "key_destruction": "pending",
    },
    "engram_memory_forget": {
        "receipt": {**RECEIPT, "operation": "tombstone", "from_state": "historical", "to_state": "tombstoned"},
        "replayed": True,
        "projection_invalidation": "complete",
        "coverage_receipt_digest": D,
    },
}


def _ok(value):
    return {"ok": True, "output": {"schema_version": 1, "value": value}, "auditId": "a-1", "redactionClass": "high"}


def _valid(name, instance):
    return Draft202012Validator(TOOLS[name].output_schema).is_valid(instance)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_output_schema_accepts_success_and_every_failure_code(name):
    assert _valid(name, _ok(GOOD_VALUES[name]))
    for code in Code:
        env = {
            "ok": False,
            "auditId": "a-1",
            "redactionClass": "high",
            "error": {"code": code.value, "message": "constant", "retriable": False},
        }
        assert _valid(name, env)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_output_schema_rejects_malformed_envelopes(name):
    good = _ok(GOOD_VALUES[name])
    bad = [
        {**good, "ok": False},
        {**good, "redactionClass": "low"},
        {**good, "extra": 1},
        {k: v for k, v in good.items() if k != "auditId"},
        {**good, "output": {"schema_version": 2, "value": GOOD_VALUES[name]}},
        {"ok": False, "auditId": "a", "redactionClass": "high", "error": {"code": "NOPE", "message": "m", "retriable": False}},
        {"ok": False, "auditId": "a", "redactionClass": "high", "error": {"code": "STALE_PAGE", "message": "m"}},
    ]
    for env in bad:
        assert not _valid(name, env), env


def test_output_error_enum_is_every_code():
    fail = TOOLS["engram_memory_get"].output_schema["oneOf"][1]
    assert fail["properties"]["error"]["properties"]["code"]["enum"] == [c.value for c in Code]


@pytest.mark.parametrize(
    "name,mutate",
    [
        ("engram_memory_request_admission", lambda v: v["outcome"].pop("record_id")),
        ("engram_memory_request_admission", lambda v: v["outcome"].update(status="duplicate_exact") or v["outcome"].pop("record_id")),
        ("engram_memory_forget", lambda v: v.pop("coverage_receipt_digest")),
        ("engram_memory_forget", lambda v: v.update(projection_invalidation="pending")),
        ("engram_memory_withdraw", lambda v: v["receipt"].update(from_state="accepted")),
        ("engram_memory_capture", lambda v: v.update(status="accepted")),
        ("engram_memory_capture", lambda v: v.update(cursor="01")),
        ("engram_memory_search", lambda v: v["records"][0].update(score=1.5)),
        ("engram_memory_get", lambda v: v["read_receipt"].update(checked_at="2026-01-01T00:00:00Z")),
    ],
)
def test_output_value_rules(name, mutate):
    import copy

    value = copy.deepcopy(GOOD_VALUES[name])
    mutate(value)
    assert not _valid(name, _ok(value))


@pytest.mark.parametrize(
    "name,mutate",
    [
        ("engram_memory_request_admission", lambda v: v["outcome"].update(status="rejected") or v["outcome"].pop("record_id")),
        ("engram_memory_request_admission", lambda v: v["outcome"].update(status="pending_adjudication")),
        ("engram_memory_forget", lambda v: v.update(projection_invalidation="pending") or v.pop("coverage_receipt_digest")),
        ("engram_memory_search", lambda v: v.pop("next_page_cursor") and v.update(records=[])),
    ],
)
def test_output_value_rules_positive(name, mutate):
    import copy

    value = copy.deepcopy(GOOD_VALUES[name])
    mutate(value)
    assert _valid(name, _ok(value))
