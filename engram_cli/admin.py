"""``engram admin``: the operator CLI over the AdminService (SPEC §12).

The storage address, the operator credential and the operator's certificate directory come
from ENGRAM_STORAGE_ADDR / ENGRAM_ADMIN_TOKEN / ENGRAM_TLS_DIR (``ENGRAM_GRPC_PLAINTEXT=true``
against a development plaintext plane), or from the state directory of a running ``engram up``
(``--state-dir``, default ``.engram``). The AdminService wants both: the bearer token and the
operator identity. On a local stack, ``enable`` also allows the dev host to act for the tenant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

import grpc

from engram_api.admin.v1 import admin_pb2, admin_pb2_grpc
from engram_api.common.v1 import common_pb2
from engram_core.languages import SEARCH_LANGUAGES
from engram_core.schemas.tools import TOOL_NAMES
from engram_cli.stackstate import StackState
from engram_core.settings import BaseEngramSettings
from engram_core.transport import Transport, TransportError


async def _call(transport: Transport, addr: str, token: str, method: str, request: object) -> admin_pb2.ScopeState:
    async with transport.channel(addr, "storage") as chan:
        stub = admin_pb2_grpc.AdminServiceStub(chan)
        return await getattr(stub, method)(request, metadata=(("authorization", f"Bearer {token}"),), timeout=10)


async def enable_scope(
    transport: Transport, addr: str, token: str, tenant: str, workspace: str, tools: list[str], confirm: list[str],
    language: str = "",
) -> admin_pb2.ScopeState:
    request = admin_pb2.EnableScopeRequest(
        scope=common_pb2.Scope(tenant=tenant, workspace=workspace), tools=tools, confirmation_required=confirm,
        language=language,
    )
    return await _call(transport, addr, token, "EnableScope", request)


def _target(opts: argparse.Namespace) -> tuple[Transport, str, str, StackState | None]:
    state = StackState.load(Path(opts.state_dir)) if (Path(opts.state_dir) / "stack.json").exists() else None
    addr = os.environ.get("ENGRAM_STORAGE_ADDR") or (state.storage_addr if state else None)
    token = os.environ.get("ENGRAM_ADMIN_TOKEN") or (state.admin_token() if state else None)
    if not addr or not token:
        raise SystemExit("engram admin: set ENGRAM_STORAGE_ADDR and ENGRAM_ADMIN_TOKEN, or run it beside `engram up`")
    settings = BaseEngramSettings()
    if settings.tls_dir is None and not settings.grpc_plaintext and state is not None:
        return state.transport("operator"), addr, token, state
    try:
        return Transport.from_settings(settings), addr, token, state
    except TransportError as exc:
        raise SystemExit(f"engram admin: {exc}") from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="engram admin", description=__doc__)
    parser.add_argument("--state-dir", default=".engram")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("enable", "disable", "show"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--tenant", required=True)
        cmd.add_argument("--workspace", required=True)
        if name == "enable":
            cmd.add_argument("--tools", nargs="+", choices=TOOL_NAMES, default=[], help="granted tools (default: all six)")
            cmd.add_argument(
                "--confirm", nargs="+", default=[],
                choices=["engram_memory_capture", "engram_memory_request_admission"],
                help="tools that need a human confirmation in this scope",
            )
            cmd.add_argument("--language", choices=SEARCH_LANGUAGES, default="",
                             help="search analyzer language: stop list and stemmer (default: keep; en for a new scope)")
    opts = parser.parse_args(argv)
    transport, addr, token, state = _target(opts)
    scope = common_pb2.Scope(tenant=opts.tenant, workspace=opts.workspace)
    try:
        if opts.command == "enable":
            reply = asyncio.run(enable_scope(transport, addr, token, opts.tenant, opts.workspace, opts.tools, opts.confirm,
                                             opts.language))
            if state is not None:
                state.allow_dev_host_tenant(opts.tenant)
        elif opts.command == "disable":
            reply = asyncio.run(_call(transport, addr, token, "DisableScope", admin_pb2.DisableScopeRequest(scope=scope)))
        else:
            reply = asyncio.run(_call(transport, addr, token, "GetScope", admin_pb2.GetScopeRequest(scope=scope)))
    except grpc.aio.AioRpcError as exc:
        print(f"engram admin: {exc.code().name}", file=sys.stderr)
        return 1
    print(json.dumps({"enabled": reply.enabled, "policy": json.loads(reply.policy_json or b"{}")}, indent=2))
    return 0
