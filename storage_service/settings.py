"""Settings of the storage process (``engram storage``), read from ``ENGRAM_*`` variables.

Built once in :func:`storage_service.server.main` and passed down. Missing required values
(``ENGRAM_MONGO_URL``, ``ENGRAM_KEYRING``, ``ENGRAM_ADMIN_TOKEN``, ``ENGRAM_HOST_REGISTRY``,
``ENGRAM_AUDIENCE``) stop start-up.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from engram_core.settings import TaskQueueSettings


class StorageSettings(TaskQueueSettings):
    """Everything the storage service needs; secrets are ``SecretStr`` so they never print."""

    grpc_port: int = 50051
    mongo_url: str = Field(..., min_length=1)
    mongo_db: str = "engram"
    # Path of the tenant KEK keyring file. ``dev_keyring`` creates it when missing (never in
    # production: a lost keyring makes every stored object unrecoverable).
    keyring: Path
    dev_keyring: bool = False
    # Operator credential of the AdminService ("authorization: Bearer <token>").
    admin_token: SecretStr = Field(..., min_length=16)
    # The trusted-host registry (the gateway's file, reloaded on change) and the audience: storage
    # verifies the host's context and confirmation itself before it acts (storage_service.authority).
    host_registry: str = Field(..., min_length=1)
    audience: str = Field(..., min_length=1)
    ledger_retention_days: float = Field(7.0, ge=7.0)
    relay_interval_seconds: float = Field(0.2, gt=0)
    # A sent outbox row whose effect is not recorded is published again after this many
    # seconds, doubling per delivery up to relay_resend_max_seconds, for relay_max_attempts
    # deliveries (about 25 minutes with the defaults); then it is marked dead (logged).
    relay_resend_after_seconds: float = Field(10.0, gt=0)
    relay_resend_max_seconds: float = Field(300.0, gt=0)
    relay_max_attempts: int = Field(10, ge=1)
    relay_enabled: bool = True
