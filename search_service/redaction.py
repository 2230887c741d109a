"""Redaction for search packets: the shared implementation lives in :mod:`engram_core.redaction`
(the gateway's get path uses the same code); re-exported here for the search library."""

from engram_core.redaction import (
    DEFAULT_ALLOWLIST,
    effective_allowlist,
    json_pointer,
    project,
    redact,
    redaction_receipt,
)

__all__ = [
    "DEFAULT_ALLOWLIST",
    "effective_allowlist",
    "json_pointer",
    "project",
    "redact",
    "redaction_receipt",
]
