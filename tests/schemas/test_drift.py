"""Drift guards: every bound published in a schema is exercised by a test, the shared digest /
instant helpers agree with the published patterns, and docs/tools.md mentions every input."""

from __future__ import annotations

import pathlib
import re

import pytest

from engram_core.digests import is_digest
from engram_core.schemas import TOOL_NAMES, TOOLS
from engram_core.schemas.tools import CURSOR_PATTERN, DIGEST_PATTERN, INSTANT_PATTERN
from engram_core.timefmt import parse_instant

from . import test_bounds, test_capture_rules, test_guard
from .helpers import all_nodes, ids

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tools.md"

# Keywords exercised by tests derived from the schema itself (they iterate the schema nodes).
GENERIC = {
    "x-engram-maxBytes": test_bounds.test_max_bytes_one_past_limit_fails,
    "x-engram-minBytes": test_bounds.test_min_bytes_one_below_limit_fails,
    "maxLength": test_bounds.test_max_bytes_counts_bytes_not_characters,
    "minimum": test_bounds.test_integer_bounds,
    "maximum": test_bounds.test_integer_bounds,
    "enum": test_bounds.test_enum_members_pass_and_others_fail,
    "const": test_bounds.test_const,
    "required": test_guard.test_every_required_field_is_required,
    "additionalProperties": test_guard.test_unknown_field_at_every_object_level,
}

# Keywords that need hand-built cases: (tool, path, keyword) -> the test covering it.
C, S, G, F, R, W = (
    "engram_memory_capture",
    "engram_memory_search",
    "engram_memory_get",
    "engram_memory_forget",
    "engram_memory_request_admission",
    "engram_memory_withdraw",
)
EXPLICIT = {
    (G, "record_id", "pattern"): test_bounds.test_record_id_pattern,
    (F, "record_id", "pattern"): test_bounds.test_record_id_pattern,
    (G, "record_id", "minLength"): test_bounds.test_record_id_pattern,
    (F, "record_id", "minLength"): test_bounds.test_record_id_pattern,
    (R, "candidate_id", "pattern"): test_bounds.test_candidate_id_pattern,
    (W, "candidate_id", "pattern"): test_bounds.test_candidate_id_pattern,
    (R, "candidate_id", "minLength"): test_bounds.test_candidate_id_pattern,
    (W, "candidate_id", "minLength"): test_bounds.test_candidate_id_pattern,
    (C, "payload/citations/*/content_digest", "pattern"): test_capture_rules.test_malformed_digest_alone_is_invalid_digest,
    (C, "evidence/evidence_digest", "pattern"): test_capture_rules.test_malformed_digest_alone_is_invalid_digest,
    (C, "payload/citations/*/observed_at", "pattern"): test_bounds.test_instants_strict_and_calendar_valid,
    (C, "payload/citations/*/observed_at", "x-engram-instant"): test_bounds.test_instants_strict_and_calendar_valid,
    (C, "payload/retention/expires_at", "pattern"): test_bounds.test_instants_strict_and_calendar_valid,
    (C, "payload/retention/expires_at", "x-engram-instant"): test_bounds.test_instants_strict_and_calendar_valid,
    (C, "payload/components", "minItems"): test_bounds.test_components_empty,
    (C, "payload/components", "maxItems"): test_bounds.test_components_count,
    (C, "payload/citations", "minItems"): test_bounds.test_citations_empty,
    (C, "payload/citations", "maxItems"): test_bounds.test_citations_count,
    (C, "payload/components/*/citation_ids", "minItems"): test_bounds.test_citation_ids_count,
    (C, "payload/components/*/citation_ids", "maxItems"): test_bounds.test_citation_ids_257_fails_on_max_items_alone,
    (C, "payload/components/*/citation_ids", "uniqueItems"): test_bounds.test_citation_ids_unique,
    (C, "evidence/citation_ids", "minItems"): test_bounds.test_citation_ids_count,
    (C, "evidence/citation_ids", "maxItems"): test_bounds.test_citation_ids_count,
    (C, "evidence/citation_ids", "uniqueItems"): test_bounds.test_citation_ids_unique,
    (C, "payload/reconciliation/family_refs", "minItems"): test_bounds.test_family_refs,
    (C, "payload/reconciliation/family_refs", "maxItems"): test_bounds.test_family_refs,
    (C, "payload/reconciliation/family_refs", "uniqueItems"): test_bounds.test_family_refs,
    (C, "payload/reconciliation/family_refs", "x-engram-strictlyAscending"): test_bounds.test_family_refs,
}

BOUND_KEYWORDS = set(GENERIC) | {k for (_, _, k) in EXPLICIT}


def _published() -> set[tuple[str, str, str]]:
    out = set()
    for tool, path, sub in all_nodes():
        for kw in sub:
            if kw in BOUND_KEYWORDS or kw.startswith("x-engram-") and kw not in ROOT_ONLY:
                out.add((tool, ids(path), kw))
    return out


# Root-level annotations enforced by the guard walk and covered by test_guard.
ROOT_ONLY = {
    "x-engram-nfc": test_guard.test_non_nfc_strings_rejected_everywhere,
    "x-engram-integerOnly": test_guard.test_integer_fields_take_only_json_integers,
    "x-engram-maxSerializedBytes": test_guard.test_serialised_size_one_past_limit_fails,
    "x-engram-hostBoundNames": test_guard.test_host_bound_names_rejected_at_every_level,
    "x-engram-rules": test_capture_rules.test_cross_reference_violations,
}


def test_every_published_bound_has_a_test():
    published = _published()
    uncovered = {
        (tool, path, kw)
        for (tool, path, kw) in published
        if kw not in GENERIC and (tool, path, kw) not in EXPLICIT
        # minLength of a byte-bounded string is implied by its byte bound
        and not (kw == "minLength" and (tool, path, "x-engram-minBytes") in published)
    }
    assert not uncovered, sorted(uncovered)
    stale = set(EXPLICIT) - published
    assert not stale, sorted(stale)
    assert all(callable(f) for f in [*GENERIC.values(), *EXPLICIT.values(), *ROOT_ONLY.values()])


def test_root_annotations_are_published_on_every_tool():
    for t in TOOLS.values():
        for kw in ROOT_ONLY:
            if kw == "x-engram-rules" and t.name != C:
                continue
            assert kw in t.input_schema, (t.name, kw)


# ----------------------------------------------------------------------------- shared helpers agree


@pytest.mark.parametrize(
    "value",
    ["sha256:" + "a" * 64, "sha256:" + "0123456789abcdef" * 4, "sha256:" + "A" * 64, "sha256:" + "a" * 63,
     "sha256:" + "a" * 64 + "\n", "sha512:" + "a" * 64, "", "sha256:" + "٠" * 64],
    ids=ascii,
)
def test_is_digest_agrees_with_published_pattern(value):
    assert is_digest(value) == bool(re.fullmatch(DIGEST_PATTERN[1:-1], value))


@pytest.mark.parametrize(
    "value",
    ["2024-02-29T00:00:00.000Z", "2023-02-29T00:00:00.000Z", "2024-01-01T00:00:00Z", "2024-01-01T00:00:00.000Z\n",
     "2024-01-01T00:00:00.000+00:00", "1970-01-01T00:00:00.000Z"],
    ids=ascii,
)
def test_parse_instant_is_at_least_as_strict_as_the_pattern(value):
    try:
        parse_instant(value)
        parsed = True
    except ValueError:
        parsed = False
    if parsed:
        assert re.fullmatch(INSTANT_PATTERN[1:-1], value)


def test_parse_instant_epoch():
    assert parse_instant("1970-01-01T00:00:00.000Z") == 0
    assert parse_instant("2026-01-01T00:00:00.000Z") == 1_767_225_600_000


def test_cursor_pattern():
    for v, ok in [("0", True), ("7", True), ("10", True), ("01", False), ("-1", False), ("", False)]:
        assert bool(re.fullmatch(CURSOR_PATTERN[1:-1], v)) is ok


# ----------------------------------------------------------------------------- docs


def _sections() -> dict[str, str]:
    text = DOCS.read_text(encoding="utf-8")
    parts = re.split(r"^## +`?(engram_memory_[a-z_]+)`?.*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_docs_have_one_section_per_tool():
    assert list(_sections()) == list(TOOL_NAMES)


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_docs_mention_every_input_property(tool):
    section = _sections()[tool]
    names = {p[-1] for _, p, _ in (n for n in all_nodes() if n[0] == tool) if p and p[-1] != "*"}
    missing = sorted(n for n in names if f"`{n}`" not in section and not re.search(rf"\b{re.escape(n)}\b", section))
    assert not missing, missing


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_docs_mention_every_output_value_field(tool):
    section = _sections()[tool]
    value = TOOLS[tool].output_schema["oneOf"][0]["properties"]["output"]["properties"]["value"]
    names = set()

    def walk(s):
        for k, v in s.get("properties", {}).items():
            names.add(k)
            walk(v)
        if "items" in s:
            walk(s["items"])

    walk(value)
    missing = sorted(n for n in names if not re.search(rf"\b{re.escape(n)}\b", section))
    assert not missing, missing
