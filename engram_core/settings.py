"""Settings shared by every process: one pydantic-settings class per process, all under the
``ENGRAM_`` environment prefix, built once in ``main`` and passed down."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# A deployment name: lower-case letters, digits and dashes (it becomes a Redis key prefix).
DEPLOYMENT_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


class BaseEngramSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    log_level: str = "INFO"
    # Seconds a stopping process gives in-flight calls before it closes.
    stop_grace_seconds: float = 10.0
    # The namespace of every Redis key and queue of one stack, so that two stacks (or a stack
    # and the test suite) on one Redis never consume each other's tasks or replay entries.
    # ``engram up`` derives it from its state directory; every process of a stack shares it.
    deployment: str = Field("engram", pattern=DEPLOYMENT_PATTERN)
    # The internal gRPC plane (engram_core.transport): this process's certificate directory
    # (ca.crt, tls.crt, tls.key; a mounted cert-manager Secret). Required unless
    # grpc_plaintext, a development setting under which no internal caller is authenticated.
    tls_dir: Path | None = None
    grpc_plaintext: bool = False


class GrpcServiceSettings(BaseEngramSettings):
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 0
    # A second, plaintext port serving grpc.health.v1 only, for kubelet probes (which cannot
    # present a client certificate); 0: none.
    probe_port: int = Field(0, ge=0, le=65535)
    # Seconds a client connection lives before the server asks it to reconnect (GOAWAY), so
    # that clients behind one ClusterIP Service spread over new pods; 0: forever. Calls in
    # flight then get ``grpc_max_connection_age_grace_seconds`` to finish.
    grpc_max_connection_age_seconds: float = Field(300.0, ge=0.0)
    grpc_max_connection_age_grace_seconds: float = Field(30.0, ge=0.0)


class TaskQueueSettings(GrpcServiceSettings):
    """What every producer and consumer of Celery tasks shares (storage, admission, worker)."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    task_queue: str = "engram"
    # Seconds after which a task a worker took but never acknowledged (the worker died) is
    # delivered again. Longer than any one task run: three calls of ``task_rpc_seconds`` plus
    # a retry's countdown (at most 10 s); a shorter one only causes duplicate deliveries.
    task_visibility_seconds: float = Field(45.0, ge=1.0)
