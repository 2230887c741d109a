"""Settings of the admission service and the Celery worker (``ENGRAM_`` prefix)."""

from __future__ import annotations

from pydantic import Field, field_validator

from admission_worker.replicas import check_spec
from engram_core.settings import TaskQueueSettings


class AdmissionSettings(TaskQueueSettings):
    grpc_port: int = 50053
    storage_addr: str = "127.0.0.1:50051"


class WorkerSettings(TaskQueueSettings):
    # The worker's own health server (no Service in Kubernetes; probes only).
    grpc_port: int = 50054
    storage_addr: str = "127.0.0.1:50051"
    search_addr: str = "127.0.0.1:50052"
    # Every search replica an invalidation must reach: comma-separated host:port, each name
    # resolved to all its addresses (a headless Service); empty: search_addr alone.
    search_replicas: str = ""
    # Task threads: each mostly waits on storage, so more threads than cores keep its group
    # commits full (2 threads held ingest at 16 in flight to 13.7/s, 8 gave 16.7/s).
    worker_concurrency: int = 8
    # Seconds for one storage/search call made by a task.
    task_rpc_seconds: float = 10.0
    # Seconds the queue may hold messages while the worker has a free slot and starts nothing
    # before the worker counts as deaf and exits to be restarted (see admission_worker.watchdog).
    worker_stall_seconds: float = Field(15.0, ge=1.0)
    # Seconds never-store screening may spend on one candidate; a screening that runs out
    # rejects the candidate (screening_incomplete): what was not read in full is not admitted.
    screening_budget_seconds: float = Field(5.0, gt=0.0, le=60.0)

    @field_validator("search_replicas")
    @classmethod
    def _replicas(cls, value: str) -> str:
        return check_spec(value)
