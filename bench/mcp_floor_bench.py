"""The MCP protocol floor on this machine: what one tool call costs through the official SDK
(client and server, Streamable HTTP, stateless, JSON responses, uvicorn with h11, as the
gateway serves it) when the tool itself does nothing.

    python bench/mcp_floor_bench.py [--calls 1000] [--reply-bytes 6000]

A server process (this file with ``--serve``) offers one tool ``echo`` with no input or output
schema that answers a text of ``--reply-bytes`` (about a search page of 10 packets), and the
same again as ``structured`` with an output schema and structured content (what the SDK then
validates on both sides, as it does for the six engram tools). The client calls each at
concurrency 1 and 4 and prints p50/p95/p99 and throughput, the server's resident memory and the
versions. Set beside ``bench/search_scale_bench.py``: everything above these figures is the
gateway's and the services' own work. Figures only: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, report, rss_mib, versions  # noqa: E402
from engram_cli.datastores import free_port  # noqa: E402

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "records": {"type": "array", "items": {"type": "object"}}},
    "required": ["ok", "records"],
}


def serve(port: int, reply_bytes: int) -> None:
    import mcp_types as types
    import uvicorn
    from mcp.server.lowlevel import Server

    # Ten packets of about equal size, like a search page.
    packet = {"record_id": "r" * 40, "text": "x" * max(0, reply_bytes // 10 - 80), "score": 0.5, "rank": 1}
    structured = {"ok": True, "records": [dict(packet, rank=i + 1) for i in range(10)]}
    text = "y" * reply_bytes

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name="echo", input_schema={"type": "object"}),
            types.Tool(name="structured", input_schema={"type": "object"}, output_schema=OUTPUT_SCHEMA),
        ])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "structured":
            import json

            return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(structured))],
                                        structured_content=structured)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server: Server[Any] = Server("floor", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    app = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                     host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, http="h11", log_level="warning")


async def wait_up(url: str, seconds: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient() as http:
        while True:
            try:
                await http.get(url)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def drive(url: str, calls: int) -> None:
    from mcp import Client

    async with Client(url) as client:
        await client.list_tools()
        for tool in ("echo", "structured"):
            for _ in range(20):  # warm-up
                await client.call_tool(tool, {"q": "warm"})
            samples: list[float] = []
            start = time.perf_counter()
            for i in range(calls):
                t0 = time.perf_counter()
                await client.call_tool(tool, {"q": f"query {i}"})
                samples.append((time.perf_counter() - t0) * 1000)
            print(report(f"{tool} c=1", samples, time.perf_counter() - start))
            sem = asyncio.Semaphore(4)
            parallel: list[float] = []

            async def one(i: int, name: str = tool) -> None:
                async with sem:
                    t0 = time.perf_counter()
                    await client.call_tool(name, {"q": f"query {i}"})
                    parallel.append((time.perf_counter() - t0) * 1000)

            start = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(calls)))
            print(report(f"{tool} c=4", parallel, time.perf_counter() - start))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--reply-bytes", type=int, default=6000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve:
        serve(opts.serve, opts.reply_bytes)
        return 0
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--reply-bytes", str(opts.reply_bytes)],
                              env=os.environ.copy())
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        asyncio.run(wait_up(f"http://127.0.0.1:{port}/"))
        print(f"# mcp floor bench: {versions(('uvicorn', 'starlette', 'httpx'))}")
        print(f"# machine: {machine()}")
        print(f"# data: calls={opts.calls} reply={opts.reply_bytes} bytes, one client, one server process")
        asyncio.run(drive(url, opts.calls))
        print(f"# server RSS {rss_mib(server.pid):.1f} MiB")
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
