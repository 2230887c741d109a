"""Cancellation (SPEC §2) against a running stack: over stdio a ``tools/call`` the peer cancels
(``notifications/cancelled``) answers the retriable ``CANCELLED`` envelope, once, and its
downstream call is cancelled; a cancelled capture — over stdio or by an HTTP client giving up
on its POST — is applied wholly or not at all, and the same-key retry says which.

The stdio tests speak JSON-RPC through the official SDK's stdio transport (``stdio_client``)
rather than its ``Client``: a client that cancels drops a late answer by id, so only the raw
stream shows what the gateway wrote."""

from __future__ import annotations

import json
import random
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import LATEST_PROTOCOL_VERSION, JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from engram_cli.spawn import SpawnedStack
from engram_core.schemas.tools import TOOL_NAMES
from engram_hostkit import HostFile
from engram_hostkit.client import EngramClient
from engram_hostkit.examples import make_capture_args, make_search_args
from engram_hostkit.tokens import CONTEXT_META_KEY, mint_context
from tests.faults.burst import PURPOSE
from tests.faults.test_outages import frozen, pid_of

SEARCH = "engram_memory_search"
CAPTURE = "engram_memory_capture"
PRINCIPAL = "user:cancel"


class RawStdio:
    """JSON-RPC over a gateway child's stdin/stdout."""

    def __init__(self, read: Any, write: Any, host: HostFile) -> None:
        self._read, self._write, self._host = read, write, host
        self._next_id = 0
        self.answers: dict[int, dict[str, Any]] = {}

    def context(self) -> str:
        host = self._host
        return mint_context(host.private_key, host_id=host.host_id, audience=host.audience, tenant=host.tenant,
                            workspace=host.workspace, principal=PRINCIPAL, agent_id="agent:cancel",
                            session="session:cancel", purpose_ref=PURPOSE, tools=TOOL_NAMES)

    async def request(self, method: str, params: dict[str, Any]) -> int:
        self._next_id += 1
        await self._write.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=self._next_id, method=method,
                                                             params=params)))
        return self._next_id

    async def call(self, tool: str, arguments: dict[str, Any]) -> int:
        return await self.request("tools/call", {"name": tool, "arguments": arguments,
                                                 "_meta": {CONTEXT_META_KEY: self.context()}})

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._write.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method, params=params)))

    async def cancel(self, request_id: int) -> None:
        await self.notify("notifications/cancelled", {"requestId": request_id, "reason": "test"})

    async def answer(self, request_id: int, timeout: float = 10.0) -> dict[str, Any]:
        """The answer to ``request_id`` (a result's dict, or ``{"error": …}``); answers to other
        ids that arrive meanwhile are kept in :attr:`answers`."""
        with anyio.fail_after(timeout):
            while request_id not in self.answers:
                item = await self._read.receive()
                assert isinstance(item, SessionMessage), item
                message = item.message
                if isinstance(message, JSONRPCResponse):
                    assert message.id not in self.answers, f"two answers for {message.id}"
                    self.answers[int(message.id)] = message.result
                elif isinstance(message, JSONRPCError):
                    assert message.id not in self.answers, f"two answers for {message.id}"
                    self.answers[int(message.id)] = {"error": message.error.model_dump()}
        return self.answers[request_id]

    async def silent(self, seconds: float) -> None:
        """Nothing more arrives within ``seconds`` (no second answer to anything)."""
        with anyio.move_on_after(seconds):
            item = await self._read.receive()
            raise AssertionError(f"unexpected message after the answers: {item}")


@asynccontextmanager
async def raw_gateway(stack: SpawnedStack, errlog: Path | None = None) -> AsyncIterator[RawStdio]:
    """A gateway child over stdio, initialized; its log (stderr) goes to ``errlog``."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "engram_cli.main", "gateway", "--stdio"],
                                   env=stack.gateway_env())
    path = errlog or stack.state_dir / "logs" / f"gateway-stdio-{uuid.uuid4().hex[:8]}.log"
    with path.open("w") as log:
        async with stdio_client(params, errlog=log) as (read, write):
            raw = RawStdio(read, write, HostFile.load(str(stack.host_file)))
            init = await raw.request("initialize", {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                                                    "clientInfo": {"name": "cancellation-test", "version": "0"}})
            assert "error" not in await raw.answer(init, timeout=30)
            await raw.notify("notifications/initialized")
            listed = await raw.request("tools/list", {"_meta": {CONTEXT_META_KEY: raw.context()}})
            assert len((await raw.answer(listed))["tools"]) == len(TOOL_NAMES)
            yield raw


def envelope(result: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in result, result
    return dict(result["structuredContent"])


def cancelled(result: dict[str, Any]) -> bool:
    env = envelope(result)
    return (result.get("isError") is True and env["ok"] is False and env["error"]["code"] == "CANCELLED"
            and env["error"]["retriable"] is True)


async def test_a_cancelled_stdio_call_answers_cancelled_once(owned_stack: SpawnedStack) -> None:
    stack = owned_stack
    errlog = stack.state_dir / "logs" / "gateway-stdio-cancel.log"
    async with raw_gateway(stack, errlog) as raw:
        warm = await raw.call(SEARCH, make_search_args("lighthouse", PURPOSE))
        assert envelope(await raw.answer(warm, timeout=60))["ok"] is True
        # Search hangs (its service is stopped): cancel the call while it waits on search.
        with frozen(pid_of(stack, "search")):
            hung = await raw.call(SEARCH, make_search_args("lighthouse", PURPOSE))
            await anyio.sleep(1.0)
            await raw.cancel(hung)
            with anyio.fail_after(5):  # well inside the call's own deadline
                assert cancelled(await raw.answer(hung))
            # A cancellation for a call already answered, or never made, changes nothing.
            await raw.cancel(hung)
            await raw.cancel(9999)
        # The session goes on: the next calls are answered as usual.
        listed = await raw.request("tools/list", {"_meta": {CONTEXT_META_KEY: raw.context()}})
        assert len((await raw.answer(listed))["tools"]) == len(TOOL_NAMES)
        done = await raw.call(SEARCH, make_search_args("lighthouse", PURPOSE))
        assert envelope(await raw.answer(done, timeout=30))["ok"] is True
        await raw.silent(1.0)
    # The handler was interrupted (and its gRPC call to search with it), and said so, in JSON.
    lines = [json.loads(line) for line in errlog.read_text().splitlines()]
    assert [e["tool"] for e in lines if e["msg"] == "call cancelled"] == [SEARCH]


async def capture_then_retry(retry: Any, args: dict[str, Any]) -> tuple[str, str]:
    """The same-key retry's status and candidate id; a second retry agrees."""
    first = await retry(args)
    assert first["ok"] is True, first
    status, candidate = first["output"]["value"]["status"], first["output"]["value"]["candidate_id"]
    again = await retry(args)
    assert again["output"]["value"]["status"] == "duplicate_exact"
    assert again["output"]["value"]["candidate_id"] == candidate
    return status, candidate


def capture_events(stack: SpawnedStack, candidate: str) -> int:
    host = HostFile.load(str(stack.host_file))
    shown = stack.admin("history", "--tenant", host.tenant, "--workspace", host.workspace, "--object", candidate,
                        "--json")
    assert shown.returncode == 0, shown.stderr
    return sum(1 for e in json.loads(shown.stdout)["events"] if e["operation"] == "capture")


async def test_cancelled_captures_are_applied_wholly_or_not_at_all(owned_stack: SpawnedStack) -> None:
    stack = owned_stack
    rng = random.Random(20261206)
    outcomes: dict[str, int] = {}
    async with raw_gateway(stack) as raw:
        async def retry(args: dict[str, Any]) -> dict[str, Any]:
            return envelope(await raw.answer(await raw.call(CAPTURE, args), timeout=30))

        for i in range(12):
            args = make_capture_args(text=f"cancelled capture {i} {uuid.uuid4()}", purpose_ref=PURPOSE)
            sent = await raw.call(CAPTURE, args)
            # Around the time a capture takes, so that some are interrupted and some complete
            # (a cancel that lands while the context is verified interrupts the call then).
            await anyio.sleep(rng.uniform(0.01, 0.025))
            await raw.cancel(sent)
            # Answered, always, once: CANCELLED or the capture's own outcome.
            first = await raw.answer(sent, timeout=30)
            answered = "cancelled" if cancelled(first) else envelope(first)["output"]["value"]["status"]
            status, candidate = await capture_then_retry(retry, args)
            # Applied once or not at all: never two capture events for one key.
            assert capture_events(stack, candidate) == 1
            if answered == "committed_pending":
                assert status == "duplicate_exact"
            outcomes[f"{answered}->{status}"] = outcomes.get(f"{answered}->{status}", 0) + 1
        await raw.silent(0.5)
    assert set(outcomes) <= {"cancelled->committed_pending", "cancelled->duplicate_exact",
                             "committed_pending->duplicate_exact"}, outcomes
    print("cancelled captures over stdio:", outcomes)


async def test_an_http_client_giving_up_on_a_capture(owned_stack: SpawnedStack) -> None:
    """The official client over Streamable HTTP gives up on the POST (its cancel scope ends):
    whatever the gateway had done stands whole, and the same-key retry says which."""
    stack = owned_stack
    rng = random.Random(6)
    host = HostFile.load(str(stack.host_file))
    async with EngramClient.connect(host, principal=PRINCIPAL, purpose_ref=PURPOSE) as client:
        async def retry(args: dict[str, Any]) -> dict[str, Any]:
            return await client.call(CAPTURE, args)

        for i in range(8):
            args = make_capture_args(text=f"abandoned capture {i} {uuid.uuid4()}", purpose_ref=PURPOSE)
            with anyio.move_on_after(rng.uniform(0.0, 0.2)):
                await client.call(CAPTURE, args)
            _, candidate = await capture_then_retry(retry, args)
            assert capture_events(stack, candidate) == 1
