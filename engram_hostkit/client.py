"""A minimal host on the official MCP Python client: mint a fresh context per call, a
confirmation when a human approved the operation, and talk to the gateway over Streamable HTTP
or stdio.

    async with EngramClient.connect(HostFile.load(".engram/host.json"),
                                    principal="user:ada", purpose_ref="purpose:support") as memory:
        tools = await memory.list_tools()
        envelope = await memory.call("engram_memory_search", {"query": "...", "purpose_ref": "purpose:support"})

The official client re-sends ``tools/list`` without ``_meta`` to validate the result of a tool
it has not listed yet, so :meth:`connect` lists tools (with a context) first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from engram_core.digests import capture_identity_digest
from engram_core.ids import candidate_id_from_digest
from engram_hostkit.hostfile import HostFile
from engram_hostkit.tokens import (
    CONFIRMATION_META_KEY,
    CONTEXT_META_KEY,
    TOOL_NAMES,
    mint_confirmation,
    mint_context,
)

TARGET_FIELDS = {
    "engram_memory_request_admission": "candidate_id",
    "engram_memory_withdraw": "candidate_id",
    "engram_memory_forget": "record_id",
}


def confirmation_target(tool: str, arguments: Mapping[str, Any], *, tenant: str, workspace: str, principal: str) -> str:
    """What a confirmation for ``tool`` must name: the candidate or record it acts on; for a
    capture, the candidate the capture will create (derived from its idempotency identity)."""
    if tool in TARGET_FIELDS:
        return str(arguments[TARGET_FIELDS[tool]])
    identity = capture_identity_digest(tenant, workspace, principal, str(arguments["idempotency_key"]))
    return candidate_id_from_digest(identity)


class EngramClient:
    def __init__(
        self,
        client: Client,
        host: HostFile,
        *,
        principal: str,
        purpose_ref: str,
        agent_id: str,
        session: str,
        tools: Iterable[str],
        tenant: str | None = None,
        workspace: str | None = None,
    ) -> None:
        self.mcp = client
        self.host = host
        self.principal = principal
        self.purpose_ref = purpose_ref
        self.agent_id = agent_id
        self.session = session
        self.tools = list(tools)
        self.tenant = tenant or host.tenant
        self.workspace = workspace or host.workspace
        # The tools of the last listing. The SDK validates a successful result against the
        # schema it listed, and re-lists *without* a context (refused -32603) for a tool it has
        # not: so a tool missing from the last listing (e.g. one made while the gateway could not
        # verify contexts, which lists none) is listed again, with a context, before the call.
        self.listed: frozenset[str] = frozenset()

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        host: HostFile,
        *,
        principal: str,
        purpose_ref: str,
        agent_id: str = "agent:default",
        session: str = "session:default",
        tools: Iterable[str] = TOOL_NAMES,
        tenant: str | None = None,
        workspace: str | None = None,
        stdio: StdioServerParameters | None = None,
        mode: str = "auto",
    ) -> AsyncIterator["EngramClient"]:
        """Connect over Streamable HTTP (``host.mcp_url``) or, with ``stdio``, to a gateway
        child process. ``mode`` is the MCP client's protocol negotiation ("auto" or "legacy")."""
        target: Any = stdio if stdio is not None else host.mcp_url
        async with Client(target, mode=mode) as client:
            engram = cls(client, host, principal=principal, purpose_ref=purpose_ref, agent_id=agent_id,
                         session=session, tools=tools, tenant=tenant, workspace=workspace)
            await engram.list_tools()
            yield engram

    def context(self, **overrides: Any) -> str:
        """A fresh invocation context for one call (overrides go to :func:`mint_context`)."""
        claims: dict[str, Any] = {
            "host_id": self.host.host_id, "audience": self.host.audience, "tenant": self.tenant,
            "workspace": self.workspace, "principal": self.principal, "agent_id": self.agent_id,
            "session": self.session, "purpose_ref": self.purpose_ref, "tools": self.tools,
        }
        claims.update(overrides)
        return mint_context(self.host.private_key, **claims)

    def confirmation(self, tool: str, arguments: Mapping[str, Any], approver: str, **overrides: Any) -> str:
        """A confirmation that ``approver`` (a human) approved exactly this call."""
        claims: dict[str, Any] = {
            "host_id": self.host.host_id, "audience": self.host.audience, "tenant": self.tenant,
            "workspace": self.workspace, "principal": self.principal, "tool": tool,
            "target": confirmation_target(tool, arguments, tenant=self.tenant, workspace=self.workspace,
                                          principal=self.principal),
            "arguments": arguments, "approver": approver,
        }
        claims.update(overrides)
        return mint_confirmation(self.host.private_key, **claims)

    async def list_tools(self, meta: Mapping[str, Any] | None = None) -> list[str]:
        result = await self.mcp.list_tools(meta=dict(meta) if meta is not None else {CONTEXT_META_KEY: self.context()})
        names = [tool.name for tool in result.tools]
        self.listed = frozenset(names)
        return names

    async def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        approver: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Call a tool; returns the envelope. ``approver`` attaches a confirmation (withdraw and
        forget always need one). ``meta`` replaces the generated ``_meta`` entirely (tests)."""
        if tool not in self.listed:
            await self.list_tools()
        if meta is None:
            meta = {CONTEXT_META_KEY: self.context()}
            if approver is not None:
                meta[CONFIRMATION_META_KEY] = self.confirmation(tool, arguments, approver)
        result = await self.mcp.call_tool(tool, dict(arguments), meta=dict(meta))
        return dict(result.structured_content or {})
