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

- Every JSON-RPC error that leaves ``/mcp`` has a constant message: the SDK's own errors
  (pydantic validation text quoting the request, a method name in ``data``, a plain-text 400)
  are rewritten to the standard message of their code, without ``data``; the gateway's own
  refusals (-32603 untrusted context, -32602 unknown tool) keep theirs.

Header read timeouts, idle keep-alive connections and the cap on concurrent connections are the
HTTP server's (``gateway/http_server.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

from engram_core.errors import UNKNOWN_TOOL_MESSAGE, UNTRUSTED_CONTEXT_MESSAGE

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
# The message every other error of a code gets (JSON-RPC 2.0's own names).
STANDARD_MESSAGES = {-32700: "Parse error", -32600: "Invalid Request", -32601: "Method not found",
                     -32602: "Invalid params", -32603: "Internal error"}
SERVER_ERROR = "Server error"
OWN_MESSAGES = frozenset({UNTRUSTED_CONTEXT_MESSAGE, UNKNOWN_TOOL_MESSAGE})


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
        await self._app(scope, _replay(b"".join(chunks), receive), _constant_errors(send))


def _constant_error(error: Any) -> dict[str, Any]:
    code = error.get("code") if isinstance(error, dict) else None
    code = code if isinstance(code, int) and not isinstance(code, bool) else -32603
    message = error.get("message") if isinstance(error, dict) else None
    if message not in OWN_MESSAGES:
        message = STANDARD_MESSAGES.get(code, SERVER_ERROR)
    return {"code": code, "message": message}


def constant_body(status: int, body: bytes) -> bytes | None:
    """The body to send instead of ``body`` (None: send it as it is). JSON-RPC errors get
    :func:`_constant_error`; a non-JSON error body becomes a JSON-RPC Invalid Request."""
    result_at, error_at = body.find(b'"result"'), body.find(b'"error"')
    if status < 400 and (error_at < 0 or 0 <= result_at < error_at):
        return None  # a result (an envelope may mention "error" inside it)
    try:
        document = json.loads(body) if body else None
    except ValueError:
        document = None
    if document is None:
        if status < 400:
            return None
        return json.dumps({"jsonrpc": "2.0", "id": None,
                           "error": {"code": INVALID_REQUEST, "message": STANDARD_MESSAGES[INVALID_REQUEST]}}).encode()
    items = document if isinstance(document, list) else [document]
    for item in items:
        if isinstance(item, dict) and "error" in item:
            item["error"] = _constant_error(item["error"])
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _constant_errors(send: Send) -> Send:
    """A send that holds the response until its body is complete, then sends it with
    :func:`constant_body` applied (and the right Content-Length)."""
    start: Message | None = None
    parts: list[bytes] = []

    async def guarded(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
            return
        if message["type"] != "http.response.body" or start is None:
            await send(message)
            return
        parts.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(parts)
        replaced = constant_body(int(start["status"]), body)
        headers = list(start.get("headers") or ())
        if replaced is not None:
            body = replaced
            headers = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"content-type")]
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return guarded


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
