"""The MCP face of the gateway: a low-level ``mcp`` Server whose handlers delegate to the
Dispatcher, served over Streamable HTTP (stateless, at /mcp, with /healthz and /readyz) or
stdio."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio.lowlevel
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from engram_core import envelope
from engram_core.errors import ProtocolRefusal
from engram_core.hosts import INVALID, MISSING, OK, HostRegistry
from engram_core.schemas.tools import TOOLS
from engram_core.host_context import ReplayGuard
from gateway.backends import ADMISSION, SEARCH, SERVING, STORAGE, Backends
from gateway.cancellation import PeerCancels
from gateway.http_guard import BODY_SECONDS, HttpGuard
from gateway.dispatch import Dispatcher

log = logging.getLogger("engram.gateway")

SERVER_NAME = "engram-memory"
SERVER_VERSION = "0.1.0"
INSTRUCTIONS = (
    "Governed long-term memory. Search before you capture; capture creates an encrypted pending "
    "candidate that only admission can turn into a record. Tenant, workspace, identity, purpose "
    "and confirmations are bound by your host, never by arguments."
)


def _tool(name: str) -> types.Tool:
    tool = TOOLS[name]
    ann = tool.annotations
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=ann["readOnlyHint"],
            destructive_hint=ann["destructiveHint"],
            idempotent_hint=ann["idempotentHint"],
            open_world_hint=ann["openWorldHint"],
        ),
    )


def _headers(ctx: Any) -> Mapping[str, str] | None:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    return headers if headers is not None else None


def _to_mcp_error(exc: ProtocolRefusal) -> MCPError:
    return MCPError(exc.jsonrpc_code, str(exc))


async def _sdk_cancellation() -> None:
    """From a handler whose await was cancelled: raise the cancellation of the SDK's own scope.

    The SDK interrupts a handler by cancelling an anyio scope, which absorbs only a
    CancelledError it recognises as its own. ``grpc.aio`` answers a cancelled call with a fresh,
    bare ``CancelledError``; left to escape, it looks foreign to the scope, cancels the
    session's task group and ends the whole stdio session (every later request unanswered).
    Inside a cancelled scope this checkpoint raises the scope's own cancellation (the caller's
    ``raise`` is then not reached); outside one (e.g. the task itself was cancelled) it returns.
    """
    await anyio.lowlevel.checkpoint_if_cancelled()


def _call_result(result: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=envelope.text_copy(result))],
        structured_content=result,
        is_error=not result["ok"],
    )


def build_server(dispatcher: Dispatcher, cancels: PeerCancels | None = None) -> Server[Any]:
    """``cancels``: over stdio, the peer's cancellations of tool calls (answered CANCELLED)."""
    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            names = await dispatcher.list_tools(params.meta if params else None, _headers(ctx))
        except ProtocolRefusal as exc:
            raise _to_mcp_error(exc) from None
        except asyncio.CancelledError:
            await _sdk_cancellation()
            raise
        return types.ListToolsResult(tools=[_tool(n) for n in names])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        request_id = getattr(ctx, "request_id", None)
        interrupt = cancels.scope_for(request_id) if cancels is not None else None
        try:
            result = await dispatcher.call_tool(params.name, params.arguments, params.meta, _headers(ctx),
                                                interrupt=interrupt)
        except ProtocolRefusal as exc:
            raise _to_mcp_error(exc) from None
        except asyncio.CancelledError:
            await _sdk_cancellation()
            raise
        finally:
            if cancels is not None:
                cancels.finished(request_id)
        return _call_result(result)

    def input_schema(name: str) -> Mapping[str, Any] | None:
        tool = TOOLS.get(name)
        return tool.input_schema if tool else None

    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        get_tool_input_schema=input_schema,
    )


# How long /readyz waits for each dependency (in parallel): a probe must answer before the
# kubelet's 2 s timeout.
READY_PROBE_SECONDS = 1.0


async def _answers(replay: ReplayGuard | None) -> bool:
    return True if replay is None else await replay.ping(READY_PROBE_SECONDS)


def build_http_app(server: Server[Any], backends: Backends, host: str, *, run_id: str = "",
                   registry: HostRegistry | None = None, replay: ReplayGuard | None = None,
                   body_seconds: float = BODY_SECONDS) -> Starlette:
    """/mcp (stateless Streamable HTTP, JSON responses) plus /healthz and /readyz.

    /mcp sits behind :class:`HttpGuard` (POST only, bounded body size and time).
    /readyz answers ``{"status": "ready"|"degraded"|"not_ready", "run_id", "host_registry",
    "dependencies": {"replay_store": "ok"|"unavailable", "storage"|"search"|"admission":
    "serving"|"not_serving"|"unavailable"}}``:

    - 503 ``not_ready`` when no call could be served: the host registry file is gone (no host
      is trusted), the replay store does not answer (no context can be verified), or storage
      is not serving (no policy can be read);
    - 200 ``degraded`` when calls go on but some fail: the registry file is invalid (the last
      valid one is in force), or search or admission is not serving (search, or admission,
      answers its retriable code; capture, get, withdraw and forget still work);
    - 200 ``ready`` otherwise.
    """
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host
    )

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        hosts = OK
        if registry is not None:
            registry.maybe_reload()
            hosts = registry.state
        replay_ok, health = await asyncio.gather(_answers(replay), backends.health(timeout=READY_PROBE_SECONDS))
        dependencies = {"replay_store": "ok" if replay_ok else "unavailable", **health}
        ready = hosts != MISSING and replay_ok and health[STORAGE] == SERVING
        degraded = hosts == INVALID or health[SEARCH] != SERVING or health[ADMISSION] != SERVING
        status = "not_ready" if not ready else "degraded" if degraded else "ready"
        return JSONResponse({"status": status, "run_id": run_id, "host_registry": hosts,
                             "dependencies": dependencies}, status_code=200 if ready else 503)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    return Starlette(
        routes=[Route("/healthz", healthz), Route("/readyz", readyz),
                Mount("/", app=HttpGuard(mcp_app, body_seconds=body_seconds))],
        lifespan=lifespan,
    )
