"""Search service settings (``ENGRAM_`` prefix)."""

from __future__ import annotations

from pydantic import field_validator

from engram_core.settings import GrpcServiceSettings


class SearchSettings(GrpcServiceSettings):
    grpc_port: int = 50052
    storage_addr: str = "127.0.0.1:50051"
    # HMAC key for page cursors, shared by every replica (≥ 32 bytes once encoded as UTF-8).
    cursor_key: str
    cursor_ttl_seconds: int = 900
    # Seconds for one storage call while catching up with the journal.
    storage_rpc_seconds: float = 10.0

    @field_validator("cursor_key")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if len(value.encode("utf-8")) < 32:
            raise ValueError("ENGRAM_CURSOR_KEY must be at least 32 bytes")
        return value
