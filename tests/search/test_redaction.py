from engram_core.digests import digest
from engram_core.redaction import (
    DEFAULT_ALLOWLIST,
    effective_allowlist,
    json_pointer,
    project,
    redact,
    redaction_receipt,
)

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


def test_search_library_reexports_the_shared_implementation():
    from engram_core import redaction as core
    from search_service import redaction as search

    for name in search.__all__:
        assert getattr(search, name) is getattr(core, name)
