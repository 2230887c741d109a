"""Hostile clients at the gateway's HTTP edge, against a running stack (``engram up``): what N
unauthenticated ``GET /mcp`` streams and N slowloris sockets (header bytes trickled) cost the
gateway process, how long they stay open, and what a trickled body gets.

Prints, per case: how many of the N connections the gateway still holds after each probe
time, its resident memory before / with them / after they are gone, and the answer the
clients got. The limits measured are the documented ones (docs/operations.md, The HTTP edge):
GET refused with 405 at once, headers within ``ENGRAM_HTTP_HEADER_SECONDS``, a body within
``ENGRAM_HTTP_BODY_SECONDS``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import rss_mib, versions  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402
from engram_cli.spawn import spawn_up  # noqa: E402


async def open_conn(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


def still_open(reader: asyncio.StreamReader) -> bool:
    """Whether the server has not closed this connection (no EOF seen yet)."""
    return not reader.at_eof()


async def drain(reader: asyncio.StreamReader) -> bytes:
    """Read what the server sent so far without blocking on an open connection."""
    data = b""
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 0.01)
        except asyncio.TimeoutError:
            return data
        if not chunk:
            return data
        data += chunk


Conns = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


def probe_line(case: str, at: float, conns: Conns, gateway: int) -> str:
    return (f"{case} n={len(conns)} t={at:.1f}s open={sum(still_open(r) for r, _ in conns)} "
            f"gateway_rss={rss_mib(gateway):.1f}MiB")


async def close_all(conns: Conns, before: float, gateway: int) -> str:
    """Close every client connection; the gateway's memory before, with them, and a second after."""
    with_them = rss_mib(gateway)
    for _, writer in conns:
        writer.close()
    await asyncio.sleep(1.0)
    return f"rss before={before:.1f} with={with_them:.1f} after_close={rss_mib(gateway):.1f} MiB"


async def get_streams(host: str, port: int, path: str, n: int, gateway: int, probes: list[float]) -> list[str]:
    before = rss_mib(gateway)
    conns = await asyncio.gather(*(open_conn(host, port) for _ in range(n)))
    started = time.monotonic()
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n").encode()
    for _, writer in conns:
        writer.write(request)
    await asyncio.gather(*(w.drain() for _, w in conns))
    lines = []
    statuses: dict[str, int] = {}
    for at in probes:
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        answers = await asyncio.gather(*(drain(r) for r, _ in conns))
        for answer in answers:
            if answer:
                status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
                statuses[status] = statuses.get(status, 0) + 1
        lines.append(probe_line("get-streams", at, conns, gateway))
    lines.append(f"get-streams n={n} answers={statuses} {await close_all(conns, before, gateway)}")
    return lines


async def slowloris(host: str, port: int, path: str, n: int, gateway: int, probes: list[float]) -> list[str]:
    before = rss_mib(gateway)
    conns = await asyncio.gather(*(open_conn(host, port) for _ in range(n)))
    started = time.monotonic()
    for _, writer in conns:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode())
    lines = []
    tick = 0
    for at in probes:
        while time.monotonic() < started + at:
            tick += 1
            for reader, writer in conns:  # one header byte pair at a time, forever
                if still_open(reader) and not writer.is_closing():
                    writer.write(f"X-{tick}: a\r\n".encode())
            await asyncio.sleep(0.5)
            await asyncio.gather(*(drain(r) for r, _ in conns))
        lines.append(probe_line("slowloris", at, conns, gateway))
    lines.append(f"slowloris n={n} {await close_all(conns, before, gateway)}")
    return lines


async def trickled_body(host: str, port: int, path: str, seconds: float) -> str:
    reader, writer = await open_conn(host, port)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
    writer.write((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                  f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n").encode())
    started = time.monotonic()
    answer = b""
    for i in range(len(body)):
        if time.monotonic() - started > seconds:
            break
        writer.write(body[i:i + 1])
        await asyncio.sleep(seconds / len(body))
        answer += await drain(reader)
        if answer:
            break
    answer += await drain(reader)
    writer.close()
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace") or "no answer"
    return f"trickled-body over {seconds:.0f}s: {status} after {time.monotonic() - started:.1f}s"


async def run(url: str, n: int, gateway: int, probes: list[float]) -> list[str]:
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/mcp"
    lines = await get_streams(host, port, path, n, gateway, [0.5, 2.0])
    lines += await slowloris(host, port, path, n, gateway, probes)
    lines.append(await trickled_body(host, port, path, max(probes)))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the slow clients keep trying")
    opts = parser.parse_args()
    probes = [opts.seconds / 6, opts.seconds * 0.4, opts.seconds]  # 5 s, 12 s, 30 s by default
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "ENGRAM_TASK_QUEUE": f"engram-bench-{uuid.uuid4().hex[:6]}"}
        env.pop("ENGRAM_MONGO_URL", None)
        stack = spawn_up(Path(tmp) / "engram", free_port(), env)
        try:
            gateway = stack.pids()["gateway"]
            lines = asyncio.run(run(stack.mcp_url, opts.connections, gateway, probes))
            print(f"# edge bench: {versions()}")
            print(f"# data: connections={opts.connections} slow clients for {opts.seconds:.0f}s; "
                  f"defaults ENGRAM_HTTP_HEADER_SECONDS / ENGRAM_HTTP_BODY_SECONDS unless set")
            for line in lines:
                print(line)
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
