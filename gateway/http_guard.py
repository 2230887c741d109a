"""The HTTP edge of /mcp, before any MCP code runs: no unauthenticated client can pin the
gateway's resources, and every refusal is a JSON-RPC error with a constant message.

- Only ``POST /mcp`` exists: the gateway is stateless (no sessions, no server-to-client
  stream), so ``GET`` and ``DELETE`` — which the SDK would answer with an open SSE stream or a
  session lookup — are 405 at once, before any stream is opened.
- A body larger than the transport limit (the SDK's 4 MiB; SPEC §3 answers arguments between
  1 MiB and the limit with an ``INVALID_SCHEMA`` envelope) is refused as soon as its declared
  length or its bytes say so: 413 with a JSON-RPC error, not a bare status.
- A body must arrive within ``body_seconds`` of the request's headers: a client trickling it
  gets 408 and the connection closed (a slow-body pin).

Header read timeouts, idle keep-alive connections and the cap on concurrent connections are the
HTTP server's (uvicorn settings in ``gateway/server.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
BODY_SECONDS = 10.0
INVALID_REQUEST = -32600
# Constant messages: never an echo of the request.
METHOD_NOT_ALLOWED = "Method not allowed: this gateway accepts POST only"
BODY_TOO_LARGE = "Request body too large"
BODY_TOO_SLOW = "Request body not received in time"


async def _refuse(send: Send, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})


class HttpGuard:
    """ASGI middleware in front of the Streamable HTTP app, for requests to ``path``."""

    def __init__(self, app: ASGIApp, *, path: str = "/mcp", max_body_bytes: int = MAX_BODY_BYTES,
                 body_seconds: float = BODY_SECONDS) -> None:
        self._app = app
        self._path = path
        self._max = max_body_bytes
        self._body_seconds = body_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self._path:
            await self._app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _refuse(send, 405, METHOD_NOT_ALLOWED, ((b"allow", b"POST"),))
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self._max):
            await _refuse(send, 413, BODY_TOO_LARGE)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self._body_seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self._max:
                        await _refuse(send, 413, BODY_TOO_LARGE)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _refuse(send, 408, BODY_TOO_SLOW)
            return
        await self._app(scope, _replay(b"".join(chunks), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body read already, then the client's own events."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
