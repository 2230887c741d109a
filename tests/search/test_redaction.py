from engram_core.digests import digest
from engram_core.redaction import (
    DEFAULT_ALLOWLIST,
    effective_allowlist,
    json_pointer,
    project,
    redact,
    redaction_receipt,
)

import pytest

from engram_core.canonical import Encoded
from search_service.packets import PacketPart
from search_service.projection import ScopeProjection

from .helpers import record


def full_record() -> dict:
    rec = record("mem_abc", "text")
    rec["reconciliation"] = {"family_refs": ["f1"]}
    rec["a/b"] = 1
    rec["c~d"] = 2
    return rec


def test_default_allowlist():
    assert DEFAULT_ALLOWLIST == (
        "record_id", "record_digest", "schema_version", "valid_time", "components",
        "primary_component_id", "primary_event", "citations", "trust", "recorded_at",
    )


def test_default_redaction_lists_removed_fields_sorted():
    rec = full_record()
    projected, redacted = redact(rec)
    assert redacted == ["/a~1b", "/c~0d", "/reconciliation", "/retention"]
    assert redacted == sorted(redacted)
    assert list(projected) == [k for k in rec if k in DEFAULT_ALLOWLIST]
    assert projected["components"] is rec["components"]


def test_record_id_always_stays():
    rec = full_record()
    projected, redacted = redact(rec, ["trust"])
    assert set(projected) == {"record_id", "trust"}
    assert "/record_id" not in redacted
    assert redacted == sorted(json_pointer(k) for k in rec if k not in ("record_id", "trust"))
    projected, _ = redact(rec, [])
    assert projected == {"record_id": "mem_abc"}


def test_nothing_redacted_when_everything_allowed():
    rec = full_record()
    projected, redacted = redact(rec, list(rec))
    assert projected == rec and redacted == []


def test_json_pointer_escaping():
    assert json_pointer("retention") == "/retention"
    assert json_pointer("a/b~c") == "/a~1b~0c"
    assert json_pointer("~1") == "/~01"


def test_receipt_digest_verifies():
    receipt = redaction_receipt("mem_abc", ["/retention"], ["trust", "trust"])
    assert receipt["allowlist"] == ["record_id", "trust"]
    body = {k: v for k, v in receipt.items() if k != "receipt_digest"}
    assert body == {"record_id": "mem_abc", "allowlist": ["record_id", "trust"],
                    "redacted_fields": ["/retention"]}
    assert receipt["receipt_digest"] == digest("redaction", body)


def test_receipt_binds_allowlist_and_fields():
    base = redaction_receipt("mem_abc", ["/retention"])["receipt_digest"]
    assert redaction_receipt("mem_abc", ["/retention"], DEFAULT_ALLOWLIST)["receipt_digest"] == base
    assert redaction_receipt("mem_abd", ["/retention"])["receipt_digest"] != base
    assert redaction_receipt("mem_abc", [])["receipt_digest"] != base
    assert redaction_receipt("mem_abc", ["/retention"], ["trust"])["receipt_digest"] != base
    assert effective_allowlist(None) == sorted(DEFAULT_ALLOWLIST)


def test_project_shape():
    rec = full_record()
    out = project(rec, ["trust"])
    projected, redacted = redact(rec, ["trust"])
    assert out == {
        "record": projected,
        "redacted_fields": redacted,
        "redaction_receipt_digest": redaction_receipt("mem_abc", redacted, ["trust"])["receipt_digest"],
    }


def test_project_agrees_with_redact_and_the_receipt_for_every_allowlist_shape():
    rec = full_record()
    for allowlist in (None, [], ["trust"], ("trust", "trust"), iter(["citations", "a/b"]), list(rec), DEFAULT_ALLOWLIST):
        fields = None if allowlist is None else list(allowlist)
        projected, redacted = redact(rec, fields)
        assert project(rec, fields) == {
            "record": projected, "redacted_fields": redacted,
            "redaction_receipt_digest": redaction_receipt("mem_abc", redacted, fields)["receipt_digest"]}


def test_the_effective_allowlist_is_a_fresh_list_each_time():
    first = effective_allowlist(["trust"])
    first.append("retention")  # a caller's change reaches no later answer (they are worked out once)
    assert effective_allowlist(["trust"]) == ["record_id", "trust"]
    assert "/retention" in redact(full_record(), ["trust"])[1]


def test_search_library_reexports_the_shared_implementation():
    from engram_core import redaction as core
    from search_service import redaction as search

    for name in search.__all__:
        assert getattr(search, name) is getattr(core, name)


# The search packets' redacted records, kept per scope (ScopeProjection.packet_part).

def _held(*records: dict) -> ScopeProjection:
    projection = ScopeProjection()
    for i, rec in enumerate(records, start=1):
        projection.add(rec, cursor=i)
    return projection


def _fresh(rec: dict, allowlist: list[str] | None, score: float, rank: int) -> Encoded:
    """What a packet is without the cache: project(), with the score and rank, canonical."""
    return Encoded.of({**project(rec, allowlist), "score": score, "rank": rank})


# Scores as the ranking publishes them (12 decimals at most), and the edges of the number format.
SCORES = (0.0, 1.0, 0.5, 0.123456789012, 1e-12, 0.000001, 0.0000011, 0.95)


def test_a_kept_packet_is_what_project_gives_by_the_same_allowlist():
    plain = full_record()
    mixed = {**record("mem_float", "text"), "weight": 0.25}  # a float: the full canonical encoder
    astral = {**record("mem_astral", "text \U0001f600"), "\U0001f600": "x", "\uffff": "y"}  # UTF-16 key order
    projection = _held(plain, mixed, astral)
    for allowlist in (None, ["trust"], ["trust", "weight"], ["\U0001f600", "\uffff"]):
        for rec in (plain, mixed, astral):
            first = projection.packet_part(rec["record_id"], allowlist)
            for rank, score in enumerate(SCORES, start=1):
                assert first.fill(score, rank) == _fresh(rec, allowlist, score, rank)
            assert first.fill(0.5, 200) == _fresh(rec, allowlist, 0.5, 200)
            assert projection.packet_part(rec["record_id"], allowlist) is first  # kept
    assert projection.parts_bytes == sum(len(part) for _, part in projection.parts.values())


def test_a_packet_part_refuses_what_would_break_its_template():
    with pytest.raises(ValueError):
        PacketPart({"record": {}, "score": 1.0})
    with pytest.raises(ValueError):  # only text given as already canonical could hold a marker raw
        PacketPart({"record": Encoded('"\x00rank\x00"')})
    # In a value the marker's characters are escaped (canonical JSON): a packet like any other.
    part = {"record": {"text": "\x00rank\x00 \x00score\x00"}, "redacted_fields": []}
    assert PacketPart(part).fill(0.25, 3) == Encoded.of({**part, "score": 0.25, "rank": 3})
    with pytest.raises(TypeError):
        PacketPart({"record": {}}).fill(0.5, True)


def test_a_projections_part_written_member_by_member_is_the_canonical_packet():
    """ScopeProjection's parts (record already Encoded, the two other members) skip the walk:
    the same bytes as canonicalising the whole packet, whatever the strings hold."""
    records = ({"record_id": "mem_a", "text": "plain"}, {"record_id": "mem_b", "weight": 0.25},
               {"record_id": "mem_c", "\U0001f600": "x", "\uffff": "y", "q": "\"\\\n\x01\x7f"})
    fields_cases = ([], ["/retention"], ["/a~1b", "/c~0d", '/"quoted"', "/\U0001f600", "/\uffff", "/\x1f"])
    for rec in records:
        for fields in fields_cases:
            for text in (Encoded.of(rec), Encoded.of(rec, plain="weight" not in rec and "q" not in rec)):
                part = {"record": text, "redacted_fields": fields, "redaction_receipt_digest": "sha256:" + "0" * 64}
                reference = {"record": rec, "redacted_fields": fields, "redaction_receipt_digest": "sha256:" + "0" * 64}
                for rank, score in ((1, 0.0), (7, 0.123456789012), (200, 1e-12)):
                    assert PacketPart(part).fill(score, rank) == Encoded.of({**reference, "score": score, "rank": rank})
    with pytest.raises(ValueError):  # a marker in a record handed over as canonical: refused as before
        PacketPart({"record": Encoded('"\x00score\x00"'), "redacted_fields": [], "redaction_receipt_digest": "d"})


def test_a_packet_part_goes_with_its_record_and_its_version():
    rec = full_record()
    projection = _held(rec)
    projection.packet_part("mem_abc", None)
    newer = {**rec, "trust": "verified"}
    projection.add(newer, cursor=2)  # a new version replaces the old one's part
    assert "mem_abc" not in projection.parts
    assert projection.packet_part("mem_abc", None).fill(0.5, 1) == _fresh(newer, None, 0.5, 1)
    assert projection.remove("mem_abc")  # forget, withdraw, expiry: no redacted copy stays
    assert "mem_abc" not in projection.parts and projection.parts_bytes == 0


def test_packet_parts_are_bounded_least_recently_used_first(monkeypatch):
    from search_service import projection as module

    monkeypatch.setattr(module, "PACKET_PARTS", 3)
    projection = _held(*(record(f"mem_{i}", f"text {i}") for i in range(5)))
    before = projection.estimate_bytes()
    for i in (0, 1, 2, 0, 3):
        projection.packet_part(f"mem_{i}", None)
    assert list(projection.parts) == ["mem_2", "mem_0", "mem_3"]  # mem_1 was the least recently shown
    assert projection.estimate_bytes() > before  # the kept parts count in the scope's budget
