"""The Celery task vocabulary shared by producers (storage relay, admission service) and the
worker: task names, task ids, the Redis namespace and the app configuration. Task arguments
are ids only: never content, keys or tokens (SPEC §11)."""

from __future__ import annotations

from celery import Celery

from engram_core.settings import TaskQueueSettings

DECIDE_ADMISSION = "engram.admission.decide"
DESTROY_KEY = "engram.keys.destroy"
INVALIDATE_PROJECTION = "engram.projections.invalidate"
# Scheduled by ``engram beat``: expire the records whose expires_at has passed.
EXPIRE_RECORDS = "engram.records.expire"

DEFAULT_QUEUE = "engram"
# The reason a candidate is held for an operator when its decision cannot be made: deciding it
# raised in the worker, its task started too often undecided, or the relay's deliveries ran out.
DECISION_FAILED = "decision_failed"


def redis_prefix(deployment: str) -> str:
    """The prefix of every Redis key of one deployment (queues, unacked sets, results, jtis)."""
    return f"{deployment}:"


def decision_task_id(request_id: str) -> str:
    """One task id per admission request: every delivery of its decision shares it, so its
    result (the signal the admission service waits for) has one key."""
    return f"decide.{request_id}"


def make_celery(settings: TaskQueueSettings) -> Celery:
    """A Celery app bound to Redis as broker and result backend, JSON only, at-least-once,
    every key under the deployment's prefix."""
    prefix = redis_prefix(settings.deployment)
    visibility = settings.task_visibility_seconds
    app = Celery("engram", broker=settings.redis_url, backend=settings.redis_url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_default_queue=settings.task_queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        result_expires=3600,
        broker_transport_options={
            "global_keyprefix": prefix,
            # A task taken by a worker that died is delivered again after this many seconds;
            # the sweep that restores it runs every few seconds (not every 100 s by default).
            "visibility_timeout": visibility,
            "unacked_restore_interval": max(1, min(10, int(visibility // 3))),
            "unacked_restore_throttle": 1,
        },
        result_backend_transport_options={"global_keyprefix": prefix},
        broker_connection_retry_on_startup=True,
        # No broadcast control channel: nothing uses it, and it would be shared across stacks.
        worker_enable_remote_control=False,
        worker_hijack_root_logger=False,
        task_track_started=False,
    )
    return app
