"""The gateway's HTTP server: uvicorn with h11, bounded for clients that have shown nothing yet.

uvicorn bounds idle keep-alive connections (``timeout_keep_alive``), concurrent connections
(``limit_concurrency``: 503 beyond) and the size of the request line plus headers
(``h11_max_incomplete_event_size``), but not the *time* headers may take: a client that sends
one header byte every few seconds (slowloris) keeps its connection forever. :class:`GuardedH11`
adds that deadline — the request line and headers must be complete ``header_seconds`` after
the connection opened or the previous response was sent, else the connection is closed — and
:func:`http_config` sets all of them in one place (logs go to the root logger: JSON).

Body size and body time are the ASGI guard's (:mod:`gateway.http_guard`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_SECONDS = 10.0
# Request line plus headers, at most (a context JWS, which may travel in a header, is ≤ 8 KiB).
MAX_HEADER_BYTES = 16 * 1024


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on the request line and headers."""

    header_seconds = HEADER_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a whole request head has arrived
            self._disarm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_seconds, self._headers_too_slow)

    def _disarm_header_deadline(self) -> None:
        handle = getattr(self, "_header_deadline", None)
        if handle is not None:
            handle.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()


def guarded_h11(header_seconds: float) -> type[GuardedH11]:
    """:class:`GuardedH11` with this header deadline (uvicorn builds protocols from a class)."""
    return type("GuardedH11", (GuardedH11,), {"header_seconds": header_seconds})


def http_config(app: Any, *, host: str, port: int, max_connections: int, idle_seconds: float,
                header_seconds: float = HEADER_SECONDS, grace_seconds: int | None = None,
                lifespan: str = "on") -> uvicorn.Config:
    """The uvicorn configuration of the gateway's HTTP edge."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_h11(header_seconds),
        log_config=None,  # uvicorn's own loggers propagate to the root's JSON handler
        log_level="warning",
        limit_concurrency=max_connections,
        timeout_keep_alive=idle_seconds,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_graceful_shutdown=grace_seconds,
        lifespan=lifespan,
    )
