"""Settings of the admission service and the Celery worker (``ENGRAM_`` prefix)."""

from __future__ import annotations

from engram_core.settings import TaskQueueSettings


class AdmissionSettings(TaskQueueSettings):
    grpc_port: int = 50053
    storage_addr: str = "127.0.0.1:50051"


class WorkerSettings(TaskQueueSettings):
    # The worker's own health server (no Service in Kubernetes; probes only).
    grpc_port: int = 50054
    storage_addr: str = "127.0.0.1:50051"
    search_addr: str = "127.0.0.1:50052"
    worker_concurrency: int = 2
    # Seconds for one storage/search call made by a task.
    task_rpc_seconds: float = 10.0
