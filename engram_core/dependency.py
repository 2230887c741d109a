"""Say when a dependency goes away and when it comes back: once, then rate-limited.

Every service holds one :class:`Dependency` per thing it cannot work without (Redis, storage,
MongoDB, the broker). Code that talks to it reports each outcome (:meth:`Dependency.failed` /
:meth:`Dependency.ok`); the first failure after a good spell logs a warning, a dependency that
stays away is logged again at most every ``repeat_seconds``, and the first success after an
outage logs its duration. Log lines are JSON with ``dependency`` and a fixed ``reason`` word
(never an exception text: it may carry a URL or a credential).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

REPEAT_SECONDS = 60.0


class Dependency:
    def __init__(self, name: str, logger: logging.Logger, *, repeat_seconds: float = REPEAT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._log = logger
        self._repeat = repeat_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._last_logged = 0.0
        self._failures = 0
        # Called with the new availability on each change (e.g. a health status to follow).
        self.on_change: Callable[[bool], None] | None = None

    @property
    def available(self) -> bool:
        return self._down_since is None

    def failed(self, reason: str = "unreachable") -> None:
        now = self._clock()
        with self._lock:
            self._failures += 1
            if self._down_since is None:
                self._down_since = now
            elif now - self._last_logged < self._repeat:
                return
            first = self._failures == 1
            self._last_logged = now
            down_for = now - self._down_since
            failures = self._failures
        extra = {"dependency": self.name, "reason": reason, "down_seconds": round(down_for, 1), "failures": failures}
        self._log.warning("dependency unavailable" if first else "dependency still unavailable", extra=extra)
        if first and self.on_change is not None:
            self.on_change(False)

    def ok(self) -> None:
        if self._down_since is None:  # the common case, without the lock
            return
        now = self._clock()
        with self._lock:
            if self._down_since is None:
                return
            down_for, failures = now - self._down_since, self._failures
            self._down_since, self._failures = None, 0
        self._log.warning("dependency available again",
                          extra={"dependency": self.name, "down_seconds": round(down_for, 1), "failures": failures})
        if self.on_change is not None:
            self.on_change(True)


# Statuses that mean the peer did not answer (anything else is an answer, if a refusal).
_UNREACHABLE = frozenset({"UNAVAILABLE"})


def observe_rpc(dependency: Dependency, exc: Exception) -> None:
    """Report a failed gRPC call to ``dependency``: unreachable (UNAVAILABLE; a deadline may be the caller's own)
    counts as away, any other status as an answer."""
    code = exc.code() if hasattr(exc, "code") else None
    name = getattr(code, "name", "")
    if name in _UNREACHABLE:
        dependency.failed(name.lower())
    else:
        dependency.ok()
