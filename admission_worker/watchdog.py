"""A worker that has stopped consuming its queue exits, so that it is restarted.

Celery's Redis consumer can lose its connection during a Redis restart and never take another
message (celery/celery#9054, #10205: still seen with Celery 5.7 / kombu 5.7 here, about one
Redis kill in three under load), while the process and its health server look fine. The
watchdog compares what the worker does with what its queue holds: the queue keeps messages
for ``stall_seconds`` while the worker has a free slot and starts nothing, so it is not
consuming. It then marks the health server NOT_SERVING and ends the process (code 70); the
supervisor (``engram up``, or Kubernetes) starts a fresh one, and anything the old one held
unacknowledged is delivered again after the visibility timeout (``acks_late``).

A message in the queue is taken at once by a consuming worker with a free slot (prefetch 1,
retries' countdowns are held in the worker, not the list), so a queue that stays non-empty
across the whole window while a slot is free is not a busy worker; it is a deaf one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from celery import Celery
from celery.signals import task_postrun, task_prerun

from engram_core.dependency import Dependency

log = logging.getLogger("engram.worker")

STALLED_EXIT_CODE = 70


class StallDetector:
    """Tracks task starts and finishes; ``stalled(queued, now)`` says whether the worker is deaf."""

    def __init__(self, concurrency: int, stall_seconds: float, now: Callable[[], float] = time.monotonic) -> None:
        self.concurrency = concurrency
        self.stall_seconds = stall_seconds
        self._now = now
        self._lock = threading.Lock()
        self._active = 0
        self._last_start = now()
        self._backlog_since: float | None = None

    def started(self) -> None:
        with self._lock:
            self._active += 1
            self._last_start = self._now()

    def finished(self) -> None:
        with self._lock:
            self._active = max(0, self._active - 1)

    def stalled(self, queued: int | None) -> bool:
        """One observation of the queue's length (None: the broker did not answer)."""
        now = self._now()
        with self._lock:
            if not queued or self._active >= self.concurrency:
                # Empty (or unknown: a broker outage is not the worker's fault), or every slot busy.
                self._backlog_since = None
                return False
            if self._backlog_since is None:
                self._backlog_since = now
            waited = now - max(self._backlog_since, self._last_start)
            return waited >= self.stall_seconds


class Watchdog:
    """Polls the queue's length every ``stall_seconds / 5`` and calls ``on_stall`` once when
    the detector says the worker is deaf."""

    def __init__(self, detector: StallDetector, queue_length: Callable[[], int | None],
                 on_stall: Callable[[], None]) -> None:
        self.detector = detector
        self._queue_length = queue_length
        self._on_stall = on_stall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engram-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        interval = max(0.2, self.detector.stall_seconds / 5)
        while not self._stop.wait(interval):
            if self.detector.stalled(self._queue_length()):
                self._on_stall()
                return


def queue_length_of(app: Celery, queue: str, broker: Dependency | None = None) -> Callable[[], int | None]:
    """LLEN of the queue's Redis list under the deployment's key prefix (None on any broker
    error); each answer or failure is reported to ``broker``."""
    import redis

    prefix = app.conf.broker_transport_options.get("global_keyprefix", "")
    client = redis.Redis.from_url(app.conf.broker_url, socket_timeout=2.0, socket_connect_timeout=2.0)

    def length() -> int | None:
        try:
            answer = int(client.llen(f"{prefix}{queue}"))
        except redis.RedisError:
            if broker is not None:
                broker.failed()
            return None
        if broker is not None:
            broker.ok()
        return answer

    return length


def install(app: Celery, queue: str, concurrency: int, stall_seconds: float,
            on_stall: Callable[[], None], broker: Dependency | None = None) -> Watchdog:
    """Hook the detector to this worker's task signals and start the watchdog thread (whose
    polls of the queue also tell ``broker`` whether the broker answers)."""
    detector = StallDetector(concurrency, stall_seconds)
    task_prerun.connect(lambda **_: detector.started(), weak=False)
    task_postrun.connect(lambda **_: detector.finished(), weak=False)
    dog = Watchdog(detector, queue_length_of(app, queue, broker), on_stall)
    dog.start()
    return dog


def exit_stalled() -> None:
    """The default reaction: say why, and end the process at once (a warm shutdown would wait
    on the consumer that no longer works)."""
    log.error("worker stopped consuming its queue; exiting so that it is restarted")
    logging.shutdown()
    os._exit(STALLED_EXIT_CODE)
