"""gateway/http_guard.py behind the gateway's real uvicorn configuration (gateway/http_server.py)
on loopback, probed with raw-socket clients: GET is 405 at once, oversize bodies 413 (declared
or streamed), a trickled body 408 on its deadline, all with a constant JSON-RPC error; the
app's own error bodies leave with constant messages; a good POST and other paths pass through;
trickled headers (slowloris) and idle connections are closed on their deadlines; connections
beyond the cap get 503."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from engram_core.errors import UNTRUSTED_CONTEXT_MESSAGE
from gateway.http_guard import BODY_TOO_LARGE, BODY_TOO_SLOW, METHOD_NOT_ALLOWED, HttpGuard
from gateway.http_server import http_config

LIMIT = 1024
DEADLINE = 1.0
HEADER_DEADLINE = 1.0
IDLE = 1.0
MAX_CONNECTIONS = 8
# Error bodies as the SDK writes them: validation text quoting the request, data echoing it.
SDK_ERRORS = {
    "/mcp/echo-validation": (400, {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32602, "message": "Validation error: input_value=[{'secret': 'FRAGMENT'}]"}}),
    "/mcp/echo-data": (200, {"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found",
                                                                 "data": "FRAGMENT"}}),
    "/mcp/own": (200, {"jsonrpc": "2.0", "id": 8, "error": {"code": -32603, "message": UNTRUSTED_CONTEXT_MESSAGE}}),
    "/mcp/result": (200, {"jsonrpc": "2.0", "id": 9, "result": {"error": {"message": "FRAGMENT kept: a result"}}}),
}


async def echo(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["path"] in SDK_ERRORS or scope["path"] == "/mcp/plain":
        await receive()
        status, document = SDK_ERRORS.get(scope["path"], (400, None))
        raw = b"Invalid Content-Type header FRAGMENT" if document is None else json.dumps(document).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain" if document is None else b"application/json"),
                                (b"content-length", str(len(raw)).encode())]})
        await send({"type": "http.response.body", "body": raw})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    reply = json.dumps({"path": scope["path"], "bytes": len(body)}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]})
    await send({"type": "http.response.body", "body": reply})


class PathPrefix:
    """Routes /mcp/<case> through the guard as /mcp (the guard only guards its own path)."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self._app = app

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await self._app({**scope, "path": scope.get("engram_case", scope["path"])}, receive, send)


class CaseRouter:
    """Outermost: remembers /mcp/<case> and hands the guard /mcp."""

    def __init__(self, app) -> None:  # type: ignore[no-untyped-def]
        self._app = app

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["path"].startswith("/mcp/"):
            scope = {**scope, "engram_case": scope["path"], "path": "/mcp"}
        await self._app(scope, receive, send)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    app = CaseRouter(HttpGuard(PathPrefix(echo), max_body_bytes=LIMIT, body_seconds=DEADLINE))
    server = uvicorn.Server(http_config(app, host="127.0.0.1", port=free, max_connections=MAX_CONNECTIONS,
                                        idle_seconds=IDLE, header_seconds=HEADER_DEADLINE, lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield free
    server.should_exit = True
    await task


async def exchange(port: int, head: bytes, body_parts: list[bytes] = (), pause: float = 0.0) -> tuple[int, dict, float]:  # type: ignore[assignment]
    """Send ``head`` then each body part (``pause`` s apart); the status, JSON body and seconds taken."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def read_all() -> bytes:
        # Read as the answer comes: a server that answers early and closes resets a connection
        # the client still writes to, and the kernel drops what was not read by then.
        got = b""
        try:
            while chunk := await reader.read(65536):
                got += chunk
        except ConnectionError:
            pass
        return got

    answer = asyncio.create_task(read_all())
    try:
        writer.write(head)
        for part in body_parts:
            if answer.done():
                break
            try:
                writer.write(part)
                await writer.drain()
            except ConnectionError:
                break  # the server answered and closed
            await asyncio.sleep(pause)
        raw = await asyncio.wait_for(answer, timeout=10)
    finally:
        writer.close()
    head_bytes, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head_bytes.split(b" ")[1])
    return status, json.loads(payload) if payload else {}, time.monotonic() - started


def post(path: str, length: int, extra: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n"
            "Connection: close\r\n").encode() + extra + b"\r\n"


async def test_get_and_delete_are_refused_at_once(port: int) -> None:
    for method in ("GET", "DELETE"):
        status, body, took = await exchange(port, f"{method} /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert (status, body["error"]["message"], body["error"]["code"]) == (405, METHOD_NOT_ALLOWED, -32600)
        assert took < 2.0


async def test_oversize_bodies_get_a_json_rpc_error(port: int) -> None:
    status, body, _ = await exchange(port, post("/mcp", 5 * 1024 * 1024))  # declared: refused before any byte
    assert (status, body["error"]["message"]) == (413, BODY_TOO_LARGE)
    chunked = (b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
               b"Connection: close\r\n\r\n")
    part = b"200\r\n" + b"x" * 512 + b"\r\n"
    status, body, _ = await exchange(port, chunked, [part] * 4 + [b"0\r\n\r\n"])
    assert (status, body["error"]["message"]) == (413, BODY_TOO_LARGE)
    status, body, _ = await exchange(port, post("/mcp", LIMIT), [b"x" * LIMIT])  # at the limit: passes
    assert (status, body) == (200, {"path": "/mcp", "bytes": LIMIT})


async def test_a_trickled_body_is_cut_off_at_its_deadline(port: int) -> None:
    status, body, took = await exchange(port, post("/mcp", 100), [b"x"] * 100, pause=0.1)
    assert (status, body["error"]["message"]) == (408, BODY_TOO_SLOW)
    assert DEADLINE <= took < DEADLINE + 2.0


async def test_a_good_post_and_other_paths_pass_through(port: int) -> None:
    status, body, _ = await exchange(port, post("/mcp", 2), [b"{}"])
    assert (status, body) == (200, {"path": "/mcp", "bytes": 2})
    status, body, _ = await exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (status, body["path"]) == (200, "/healthz")


async def test_the_apps_error_bodies_leave_with_constant_messages(port: int) -> None:
    expected = {
        "/mcp/echo-validation": (400, {"code": -32602, "message": "Invalid params"}),
        "/mcp/echo-data": (200, {"code": -32601, "message": "Method not found"}),
        "/mcp/own": (200, {"code": -32603, "message": UNTRUSTED_CONTEXT_MESSAGE}),
        "/mcp/plain": (400, {"code": -32600, "message": "Invalid Request"}),
    }
    for path, (status_wanted, error) in expected.items():
        status, body, _ = await exchange(port, post(path, 2), [b"{}"])
        assert (status, body["error"]) == (status_wanted, error), path
        assert "FRAGMENT" not in json.dumps(body)
    status, body, _ = await exchange(port, post("/mcp/result", 2), [b"{}"])
    assert (status, body["result"]) == (200, SDK_ERRORS["/mcp/result"][1]["result"])


async def closed_after(port: int, send: bytes = b"", trickle: bytes = b"", pause: float = 0.0,
                       bound: float = 10.0) -> float:
    """Seconds until the server closes a connection that sends ``send``, then ``trickle`` one
    byte every ``pause`` s."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(send)

        async def dribble() -> None:
            for byte in trickle:
                await asyncio.sleep(pause)
                writer.write(bytes([byte]))

        feeder = asyncio.create_task(dribble())
        try:
            async with asyncio.timeout(bound):
                while await reader.read(65536):
                    pass
        finally:
            feeder.cancel()
    except ConnectionError:
        pass
    finally:
        writer.close()
    return time.monotonic() - started


async def test_trickled_headers_are_cut_off_at_their_deadline(port: int) -> None:
    head = post("/mcp", 2)
    took = await closed_after(port, head[:10], head[10:], pause=0.2)
    assert HEADER_DEADLINE <= took < HEADER_DEADLINE + 1.5
    # Nothing at all sent: the same deadline.
    took = await closed_after(port)
    assert HEADER_DEADLINE - 0.1 <= took < HEADER_DEADLINE + 1.5


async def test_an_idle_keep_alive_connection_is_closed(port: int) -> None:
    keep = post("/mcp", 2).replace(b"Connection: close\r\n", b"")
    took = await closed_after(port, keep + b"{}")
    assert IDLE <= took < IDLE + 1.5


async def test_connections_beyond_the_cap_get_503(port: int) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS)]
    try:
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post("/mcp", 2) + b"{}")
        raw = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
        assert raw.startswith(b"HTTP/1.1 503 ")  # uvicorn's own constant "Service Unavailable"
    finally:
        for _, writer in held:
            writer.close()
    await asyncio.sleep(0.2)
    status, body, _ = await exchange(port, post("/mcp", 2), [b"{}"])
    assert (status, body) == (200, {"path": "/mcp", "bytes": 2})
