"""Settings shared by every process: one pydantic-settings class per process, all under the
``ENGRAM_`` environment prefix, built once in ``main`` and passed down."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class BaseEngramSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    log_level: str = "INFO"
    # Seconds a stopping process gives in-flight calls before it closes.
    stop_grace_seconds: float = 10.0


class GrpcServiceSettings(BaseEngramSettings):
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 0
