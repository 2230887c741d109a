"""SPEC §4: every result's envelope and its identical JSON text copy (engram_core.envelope)."""

from __future__ import annotations

import json

import pytest

from engram_core import envelope
from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError

VALUES = (
    {},
    {"records": [], "rank_receipt": {"candidate_count": 0}},
    {"records": [{"record": {"text": "Grüße \U0001f600 \"q\" \\ \n \x01", "score": 0.123456789012, "rank": 1}}],
     "n": 1e-7, "big": 1e21, "neg": -0.0, "t": True, "none": None},
    {"status": "committed_pending", "candidate_id": "cand_" + "a" * 52},
)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("audit_id", ["audit:1", "audit:é\"x"])
def test_a_success_around_a_parsed_value_is_written_around_its_text(value: dict, audit_id: str) -> None:
    for raw in (canonicalize(value), json.dumps(value, ensure_ascii=True).encode()):  # any JSON text of it
        parsed = envelope.ParsedValue.parse(raw)
        assert parsed == value and parsed.text == raw.decode()
        result = envelope.success(parsed, audit_id)
        text = envelope.text_copy(result)
        assert json.loads(text) == result == envelope.success(value, audit_id)
        assert parsed.text in text  # written around, not serialised again


def test_any_other_envelope_is_serialised() -> None:
    plain = envelope.success({"a": [1, 2.5, "ü"]}, "audit:1")
    assert envelope.text_copy(plain) == json.dumps(plain, ensure_ascii=False, separators=(",", ":"))
    failed = envelope.failure(EngramError(Code.STALE_PAGE), "audit:2")
    assert json.loads(envelope.text_copy(failed)) == failed and failed["ok"] is False
    # A parsed value in any other shape than success's own: serialised whole, never spliced.
    odd = {**envelope.success(envelope.ParsedValue.parse(b'{"x":1}'), "audit:3"), "extra": 1}
    assert envelope.text_copy(odd) == json.dumps(odd, ensure_ascii=False, separators=(",", ":"))


def test_a_parsed_value_is_a_json_object() -> None:
    for raw in (b"[]", b"1", b'"x"', b"null"):
        with pytest.raises(ValueError):
            envelope.ParsedValue.parse(raw)
    with pytest.raises(ValueError):
        envelope.ParsedValue.parse(b"{")
