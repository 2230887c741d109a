"""``engram beat``: the one scheduler of periodic tasks (Celery beat), its own process.

It sends ``engram.records.expire`` every ``ENGRAM_EXPIRY_SWEEP_SECONDS`` (default 60) to the
worker queue; the worker runs the sweep through storage (:mod:`storage_service.sweeper`). Beat
holds no state worth keeping (an in-memory schedule: after a restart the next sweep runs one
interval later) and sends ids only — the task has no arguments. A sweep message that waited in
the queue longer than an interval expires unrun (the next one does the work), so a worker outage
never leaves a pile of sweeps behind. Run exactly one (a Deployment of one replica, ``Recreate``);
two would only sweep twice as often — the sweep is idempotent.

Like the worker it serves grpc.health.v1 (mutual TLS under the worker's identity, and a
plaintext probe port for the kubelet); it turns NOT_SERVING when it stops.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from grpc_health.v1 import health_pb2
from pydantic import Field

from admission_worker.worker import start_health_server
from engram_core.grpc_server import LIVENESS_SERVICE
from engram_core import logs
from engram_core.settings import TaskQueueSettings
from engram_core.taskq import EXPIRE_RECORDS, make_celery
from engram_core.transport import Transport

log = logging.getLogger("engram.beat")
EXPIRY_ENTRY = "expire-records"


class BeatSettings(TaskQueueSettings):
    # The health server (probes and `engram up`; no Service in Kubernetes).
    grpc_port: int = 50055
    # Seconds between two expiry sweeps.
    expiry_sweep_seconds: float = Field(60.0, ge=1.0, le=86_400.0)


def schedule(settings: BeatSettings) -> dict[str, dict[str, Any]]:
    """Beat's schedule: the expiry sweep, each message expiring after one interval."""
    every = settings.expiry_sweep_seconds
    return {EXPIRY_ENTRY: {"task": EXPIRE_RECORDS, "schedule": every,
                           "options": {"queue": settings.task_queue, "expires": every}}}


def configure(app: Celery, settings: BeatSettings) -> Celery:
    app.conf.update(beat_schedule=schedule(settings), beat_scheduler="celery.beat:Scheduler",
                    beat_max_loop_interval=min(5.0, settings.expiry_sweep_seconds))
    return app


def main() -> int:
    settings = BeatSettings()
    logs.configure("beat", settings.log_level)
    app = configure(make_celery(settings), settings)
    transport = Transport.from_settings(settings)
    servers, servicer, port = start_health_server(transport, settings.grpc_host, settings.grpc_port,
                                                  settings.probe_port)
    log.info("beat health on port %d: expiry sweep every %.0f s", port, settings.expiry_sweep_seconds)
    try:
        app.Beat(loglevel="WARNING", quiet=True, redirect_stdouts=False).run()
    finally:
        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        for server in servers:
            server.stop(settings.stop_grace_seconds)
    return 0
