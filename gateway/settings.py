"""Gateway settings (environment, ``ENGRAM_`` prefix)."""

from __future__ import annotations

from pydantic import Field

from engram_core.settings import BaseEngramSettings


class GatewaySettings(BaseEngramSettings):
    gateway_host: str = "127.0.0.1"
    gateway_port: int = 8080
    storage_addr: str = "127.0.0.1:50051"
    search_addr: str = "127.0.0.1:50052"
    admission_addr: str = "127.0.0.1:50053"
    redis_url: str = "redis://127.0.0.1:6379/0"
    # The trusted-host registry file (JSON); reloaded when it changes.
    host_registry: str
    # The audience every context and confirmation must name.
    audience: str
    # Scopes whose policy and journal head are reused while their change token in Redis is
    # unchanged (engram_core.scope_changes); 0: read them from storage on every call.
    policy_cache_scopes: int = Field(4096, ge=0)
    # Upper bound for one downstream call, whatever the context deadline says.
    max_call_seconds: float = 30.0
    # This run's identity, reported by /readyz (``engram up`` sets it to tell its own gateway
    # from another server on the port).
    run_id: str = ""
    # The HTTP edge (gateway/http_guard.py, gateway/http_server.py, docs/operations.md):
    # seconds a request body may take to arrive, open connections and requests at once (more:
    # 503), seconds an idle keep-alive connection stays open, seconds the request line and
    # headers may take (from the connection's start or the previous response).
    http_body_seconds: float = Field(10.0, gt=0.0)
    http_max_connections: int = Field(1000, ge=1)
    http_idle_seconds: float = Field(5.0, gt=0.0)
    http_header_seconds: float = Field(10.0, gt=0.0)
