"""engram_core — the shared contract core: error codes, canonical JSON, digests, ids, schemas,
envelopes and small runtime helpers used by every engram service."""
