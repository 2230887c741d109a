"""The worker watchdog: a queue that keeps messages while a slot is free and nothing starts
means a deaf consumer; an empty queue, busy slots, a recent start or a broker outage do not."""

from __future__ import annotations

import threading

from admission_worker.watchdog import StallDetector, Watchdog


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def detector(concurrency: int = 2, stall: float = 10.0) -> tuple[StallDetector, Clock]:
    clock = Clock()
    return StallDetector(concurrency, stall, now=clock), clock


def test_backlog_with_a_free_slot_for_the_whole_window_is_a_stall() -> None:
    d, clock = detector()
    assert d.stalled(3) is False
    clock.t += 9.9
    assert d.stalled(3) is False
    clock.t += 0.1
    assert d.stalled(3) is True


def test_an_empty_queue_is_never_a_stall_and_resets_the_window() -> None:
    d, clock = detector()
    d.stalled(3)
    clock.t += 9
    assert d.stalled(0) is False
    clock.t += 9
    assert d.stalled(3) is False  # the window starts again at the new backlog
    clock.t += 10
    assert d.stalled(3) is True


def test_every_slot_busy_is_not_a_stall() -> None:
    d, clock = detector(concurrency=2)
    d.started()
    d.started()
    d.stalled(5)
    clock.t += 60
    assert d.stalled(5) is False
    d.finished()
    assert d.stalled(5) is False
    clock.t += 10
    assert d.stalled(5) is True


def test_a_task_started_within_the_window_is_consumption() -> None:
    d, clock = detector()
    d.stalled(5)
    clock.t += 8
    d.started()
    d.finished()
    clock.t += 8
    assert d.stalled(5) is False
    clock.t += 2
    assert d.stalled(5) is True


def test_a_broker_that_does_not_answer_is_not_the_workers_stall() -> None:
    d, clock = detector()
    d.stalled(5)
    clock.t += 30
    assert d.stalled(None) is False
    clock.t += 5
    assert d.stalled(5) is False


def test_the_watchdog_calls_on_stall_once_from_its_thread() -> None:
    stalled = threading.Event()
    calls: list[int] = []
    d = StallDetector(1, 1.0)

    def on_stall() -> None:
        calls.append(1)
        stalled.set()

    dog = Watchdog(d, lambda: 4, on_stall)
    dog.start()
    assert stalled.wait(5.0)
    dog.stop()
    assert calls == [1]


def test_the_watchdog_stays_quiet_while_the_queue_drains() -> None:
    fired = threading.Event()
    dog = Watchdog(StallDetector(1, 1.0), lambda: 0, fired.set)
    dog.start()
    assert not fired.wait(1.6)
    dog.stop()
