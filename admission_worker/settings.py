"""Settings of the admission service and the Celery worker (``ENGRAM_`` prefix)."""

from __future__ import annotations

from pydantic import Field

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
    # Seconds the queue may hold messages while the worker has a free slot and starts nothing
    # before the worker counts as deaf and exits to be restarted (see admission_worker.watchdog).
    worker_stall_seconds: float = Field(15.0, ge=1.0)
