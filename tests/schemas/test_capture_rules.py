"""Capture cross-references, expires_at versus now, and the digest-error precedence."""

from __future__ import annotations

import pytest

from engram_core.errors import Code
from engram_hostkit.examples import content_digest_of, make_capture_args, make_maximal_capture_args

from .helpers import NOW_MS, PURPOSE, assert_code, assert_valid, full_args

S = Code.INVALID_SCHEMA
D = Code.INVALID_DIGEST
CAPTURE = "engram_memory_capture"


def _two() -> dict:
    """Two components (primary comp-1 cites cite-1; comp-2 cites cite-2), two citations."""
    args = make_capture_args(purpose_ref=PURPOSE)
    p = args["payload"]
    c2 = dict(p["citations"][0], citation_id="cite-2", source_ref="doc:other")
    p["citations"].append(c2)
    p["components"].append({"component_id": "comp-2", "kind": "evidence", "text": "more", "citation_ids": ["cite-2"]})
    return args


def test_two_component_fixture_is_valid():
    assert_valid(CAPTURE, _two())


def _m(fn):
    def build():
        args = _two()
        fn(args)
        return args

    return build


CROSS_REF_VIOLATIONS = {
    "duplicate component_id": _m(lambda a: a["payload"]["components"][1].update(component_id="comp-1")),
    "duplicate citation_id": _m(lambda a: a["payload"]["citations"][1].update(citation_id="cite-1")),
    "component cites unknown citation": _m(lambda a: a["payload"]["components"][1].update(citation_ids=["cite-2", "cite-9"])),
    "primary_component_id unresolved": _m(lambda a: a["payload"].update(primary_component_id="comp-9")),
    "primary_component_id names a citation": _m(lambda a: a["payload"].update(primary_component_id="cite-1")),
    "primary_event citation not in citations": _m(lambda a: a["payload"]["primary_event"].update(citation_id="cite-9")),
    "primary_event citation not cited by primary": _m(lambda a: a["payload"]["primary_event"].update(citation_id="cite-2")),
    "evidence cites unknown citation": _m(lambda a: a["evidence"].update(citation_ids=["cite-1", "cite-9"])),
    "evidence cites a component id": _m(lambda a: a["evidence"].update(citation_ids=["comp-1"])),
    "t_end before t": _m(lambda a: a["payload"]["valid_time"].update(t_end=a["payload"]["valid_time"]["t"] - 1)),
}


@pytest.mark.parametrize("build", list(CROSS_REF_VIOLATIONS.values()), ids=list(CROSS_REF_VIOLATIONS))
def test_cross_reference_violations(build):
    assert_code(CAPTURE, build(), S)


CROSS_REF_OK = {
    "primary cites both, event uses the second": _m(
        lambda a: (a["payload"]["components"][0].update(citation_ids=["cite-1", "cite-2"]), a["payload"]["primary_event"].update(citation_id="cite-2"))
    ),
    "primary is the second component": _m(
        lambda a: (a["payload"].update(primary_component_id="comp-2"), a["payload"]["primary_event"].update(citation_id="cite-2"))
    ),
    "uncited citation is allowed": _m(lambda a: a["payload"]["components"].pop()),
    "evidence cites a subset": _m(lambda a: a["evidence"].update(citation_ids=["cite-2"])),
    "evidence cites all": _m(lambda a: a["evidence"].update(citation_ids=["cite-2", "cite-1"])),
    "component and citation ids may coincide": _m(
        lambda a: (
            a["payload"]["components"][1].update(component_id="cite-2"),
        )
    ),
    "t_end equal to t": _m(lambda a: a["payload"]["valid_time"].update(t_end=a["payload"]["valid_time"]["t"])),
    "ids are case-sensitive": _m(
        lambda a: (a["payload"]["components"][1].update(component_id="COMP-1"),)
    ),
}


@pytest.mark.parametrize("build", list(CROSS_REF_OK.values()), ids=list(CROSS_REF_OK))
def test_cross_reference_valid_variants(build):
    assert_valid(CAPTURE, build())


def test_maximal_fixture_cross_reference_broken_at_the_end():
    args = make_maximal_capture_args()
    args["payload"]["components"][-1]["citation_ids"][-1] = "cite-999"
    assert_code(CAPTURE, args, S)
    args = make_maximal_capture_args()
    args["evidence"]["citation_ids"][-1] = "cite-999"
    assert_code(CAPTURE, args, S)


# ----------------------------------------------------------------------------- expires_at vs now

EXPIRES_NOW = "2026-01-01T00:00:00.000Z"  # == NOW_MS


@pytest.mark.parametrize(
    "expires_at,ok",
    [
        ("2026-01-01T00:00:00.001Z", True),  # now + 1 ms
        ("2026-01-01T00:00:00.000Z", False),  # exactly now
        ("2025-12-31T23:59:59.999Z", False),  # now - 1 ms
        ("1970-01-01T00:00:00.000Z", False),
        ("9999-12-31T23:59:59.999Z", True),  # the cap is storage's business (UNAUTHORIZED)
    ],
)
def test_expires_at_strictly_after_now(expires_at, ok):
    args = make_capture_args(purpose_ref=PURPOSE, retention={"derivative_rule": "make-ineligible", "expires_at": expires_at})
    if ok:
        assert_valid(CAPTURE, args)
    else:
        assert_code(CAPTURE, args, S)


def test_expires_at_uses_the_given_now():
    args = make_capture_args(purpose_ref=PURPOSE, retention={"derivative_rule": "retain", "expires_at": EXPIRES_NOW})
    assert_valid(CAPTURE, args, now_ms=NOW_MS - 1)
    assert_code(CAPTURE, args, S, now_ms=NOW_MS)


# ----------------------------------------------------------------------------- digests

GOOD = content_digest_of("x")
MALFORMED = [
    "sha256:" + "A" * 64,
    "sha256:" + "a" * 63,
    "sha256:" + "a" * 65,
    "sha256:" + "g" * 64,
    "SHA256:" + "a" * 64,
    "sha512:" + "a" * 64,
    "sha256" + "a" * 64,
    "sha256: " + "a" * 63,
    "sha256:" + "a" * 64 + "\n",
    "\nsha256:" + "a" * 64,
    "a" * 64,
    "",
    "sha256:",
    "sha256:" + "٠" * 64,  # Arabic-Indic digits are not hex
]


def _set_digest(args, where, value):
    if where == "content_digest":
        args["payload"]["citations"][0]["content_digest"] = value
    else:
        args["evidence"]["evidence_digest"] = value


@pytest.mark.parametrize("where", ["content_digest", "evidence_digest"])
@pytest.mark.parametrize("value", MALFORMED, ids=ascii)
def test_malformed_digest_alone_is_invalid_digest(where, value):
    args = full_args(CAPTURE)
    _set_digest(args, where, value)
    assert_code(CAPTURE, args, D)


@pytest.mark.parametrize("where", ["content_digest", "evidence_digest"])
def test_good_digest_passes(where):
    args = full_args(CAPTURE)
    _set_digest(args, where, GOOD)
    assert_valid(CAPTURE, args)


def test_malformed_digest_in_the_last_of_256_citations():
    args = make_maximal_capture_args()
    args["payload"]["citations"][-1]["content_digest"] = "sha256:" + "F" * 64
    assert_code(CAPTURE, args, D)


def test_both_digests_malformed_is_still_invalid_digest():
    args = full_args(CAPTURE)
    _set_digest(args, "content_digest", "sha256:xyz")
    _set_digest(args, "evidence_digest", "md5:abc")
    assert_code(CAPTURE, args, D)


OTHER_VIOLATIONS = {
    "unknown field": lambda a: a.update(extra="x"),
    "bad kind": lambda a: a["payload"]["components"][0].update(kind="note"),
    "cross-reference": lambda a: a["evidence"].update(citation_ids=["cite-9"]),
    "expired": lambda a: a["payload"]["retention"].update(expires_at="2000-01-01T00:00:00.000Z"),
    "t_end before t": lambda a: a["payload"]["valid_time"].update(t_end=0),
    "short key": lambda a: a.update(idempotency_key="short"),
    "non-NFC text": lambda a: a["payload"]["components"][0].update(text="e\u0301"),
    "null": lambda a: a["payload"].update(retention=None),
}


@pytest.mark.parametrize("where", ["content_digest", "evidence_digest"])
@pytest.mark.parametrize("violate", list(OTHER_VIOLATIONS.values()), ids=list(OTHER_VIOLATIONS))
def test_malformed_digest_with_another_violation_is_invalid_schema(where, violate):
    args = full_args(CAPTURE)
    _set_digest(args, where, "sha256:" + "A" * 64)
    violate(args)
    assert_code(CAPTURE, args, S)


@pytest.mark.parametrize("where", ["content_digest", "evidence_digest"])
@pytest.mark.parametrize("value", [None, 5, True, ["sha256:" + "a" * 64], {"d": 1}], ids=repr)
def test_digest_of_the_wrong_type_is_invalid_schema(where, value):
    args = full_args(CAPTURE)
    _set_digest(args, where, value)
    assert_code(CAPTURE, args, S)


@pytest.mark.parametrize("where", ["content_digest", "evidence_digest"])
def test_missing_digest_is_invalid_schema(where):
    args = full_args(CAPTURE)
    if where == "content_digest":
        del args["payload"]["citations"][0]["content_digest"]
    else:
        del args["evidence"]["evidence_digest"]
    assert_code(CAPTURE, args, S)


def test_digest_named_field_in_a_wrong_place_is_invalid_schema():
    args = full_args(CAPTURE)
    args["payload"]["content_digest"] = "sha256:" + "A" * 64
    assert_code(CAPTURE, args, S)
    args = full_args("engram_memory_search")
    args["evidence_digest"] = "bad"
    assert_code("engram_memory_search", args, S)
