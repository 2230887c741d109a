"""gateway/http_guard.py behind a real uvicorn on loopback, probed with raw-socket clients: GET
is 405 at once, oversize bodies 413 (declared or streamed), a trickled body 408 on its
deadline, all with a constant JSON-RPC error; a good POST and other paths pass through."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from gateway.http_guard import BODY_TOO_LARGE, BODY_TOO_SLOW, METHOD_NOT_ALLOWED, HttpGuard

LIMIT = 1024
DEADLINE = 1.0


async def echo(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
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


@pytest.fixture
async def port() -> AsyncIterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    app = HttpGuard(echo, max_body_bytes=LIMIT, body_seconds=DEADLINE)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free, log_level="warning", lifespan="off"))
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
