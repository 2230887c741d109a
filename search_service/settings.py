"""Search service settings (``ENGRAM_`` prefix)."""

from __future__ import annotations

from pydantic import Field, field_validator

from engram_core.settings import GrpcServiceSettings


class SearchSettings(GrpcServiceSettings):
    grpc_port: int = 50052
    storage_addr: str = "127.0.0.1:50051"
    # HMAC key for page cursors, shared by every replica (≥ 32 bytes once encoded as UTF-8).
    cursor_key: str
    cursor_ttl_seconds: int = 900
    # Seconds for one storage call while catching up with the journal.
    storage_rpc_seconds: float = 10.0
    # How many of the best hits a first page pins (ranked exactly; the ordered-ids digest and
    # every later page cover this list, and paging ends after it).
    pinned_hits: int = Field(200, ge=50, le=10_000)
    # This replica's name in coverage receipts (default: hostname:port).
    replica_id: str = Field("", pattern=r"^[A-Za-z0-9._:\[\]-]{0,128}$")
    # Threads that rank and build pages off the event loop.
    search_threads: int = Field(2, ge=1, le=64)
    # Resident estimate of all scope projections; beyond it whole scopes are evicted, least
    # recently used first (they rebuild from the journal on their next search).
    projection_budget_bytes: int = Field(1024 * 1024 * 1024, ge=16 * 1024 * 1024)
    # Seconds between progress lines of a long catch-up (a cold rebuild).
    projection_progress_seconds: float = Field(5.0, gt=0)
    # The semantic channel (SPEC §9): the packaged embedding model, verified at start. Off:
    # lexical ranking only (every rank receipt says so; lexical_and_semantic callers get
    # RANKING_UNAVAILABLE).
    semantic_channel: bool = True
    # onnxruntime threads for one embedding batch (records as the journal is applied, queries).
    embedding_threads: int = Field(2, ge=1, le=64)
    # Bytes of pinned orderings kept for later pages (least recently used dropped first).
    page_cache_bytes: int = Field(32 * 1024 * 1024, ge=1024 * 1024)

    @field_validator("cursor_key")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if len(value.encode("utf-8")) < 32:
            raise ValueError("ENGRAM_CURSOR_KEY must be at least 32 bytes")
        return value
