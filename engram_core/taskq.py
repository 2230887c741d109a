"""The Celery task vocabulary shared by producers (storage relay, admission service) and the
worker: task names, the queue and the app configuration. Task arguments are ids only: never
content, keys or tokens (SPEC §11)."""

from __future__ import annotations

from celery import Celery

DECIDE_ADMISSION = "engram.admission.decide"
DESTROY_KEY = "engram.keys.destroy"
INVALIDATE_PROJECTION = "engram.projections.invalidate"

DEFAULT_QUEUE = "engram"


def make_celery(redis_url: str, queue: str = DEFAULT_QUEUE) -> Celery:
    """A Celery app bound to Redis as broker and result backend, JSON only, at-least-once."""
    app = Celery("engram", broker=redis_url, backend=redis_url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_default_queue=queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        result_expires=3600,
        broker_transport_options={"visibility_timeout": 3600},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_track_started=False,
    )
    return app
