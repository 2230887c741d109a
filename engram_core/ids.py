"""Identifiers (SPEC §3): ``mem_`` / ``cand_`` + lowercase unpadded base32 of 32 digest bytes."""

from __future__ import annotations

import base64
import os
import re

from engram_core.digests import digest_hex_bytes

RECORD_ID_RE = re.compile(r"^mem_[a-z2-7]{52}\Z")
CANDIDATE_ID_RE = re.compile(r"^cand_[a-z2-7]{52}\Z")


def b32(data: bytes) -> str:
    return base64.b32encode(data).decode("ascii").rstrip("=").lower()


def record_id_from_digest(record_digest: str) -> str:
    return "mem_" + b32(digest_hex_bytes(record_digest))


def candidate_id_from_digest(capture_identity_digest: str) -> str:
    return "cand_" + b32(digest_hex_bytes(capture_identity_digest))


def is_record_id_strict(value: object) -> bool:
    return isinstance(value, str) and RECORD_ID_RE.match(value) is not None


def is_candidate_id_strict(value: object) -> bool:
    return isinstance(value, str) and CANDIDATE_ID_RE.match(value) is not None


def new_event_id() -> str:
    return "evt_" + b32(os.urandom(16))


def new_request_id() -> str:
    return "req_" + b32(os.urandom(16))
