"""A ``tools/call`` the peer cancels over stdio, through the real MCP SDK server, the gateway's
MCP app, :class:`gateway.cancellation.PeerCancels` and :meth:`Dispatcher.call_tool`: answered
exactly once with what the call came to — ``CANCELLED`` (retriable, with the call's audit id)
when it was interrupted, wherever the cancellation landed (while the context was being
verified: then nothing was done), the call's own envelope when it had finished before the
interruption reached it — and the session goes on.

Only the dispatcher's two ends are stand-ins (context verification and the verified call
downstream), so that each moment a cancellation can land in is made to happen: against a real
stack it is a race (tests/faults/test_cancellation.py runs that race)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp_types import LATEST_PROTOCOL_VERSION, JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from gateway.cancellation import PeerCancels
from gateway.dispatch import Dispatcher
from gateway.mcp_app import build_server

AUDIT_ID = "audit:peer-cancel"
DONE = {"ok": True, "auditId": AUDIT_ID, "output": {"value": {"status": "committed_pending"}}}


class Downstream(Dispatcher):
    """A Dispatcher whose verification and verified call are stand-ins, per ``mode``:

    - ``plain``: answers at once;
    - ``finish``: the call completes despite an interruption (downstream answered first);
    - ``interrupt``: waits until interrupted;
    - ``bare``: waits, and answers its interruption with a fresh CancelledError (as grpc.aio does);
    - ``early``: verification waits for :attr:`release` (a cancellation lands meanwhile).
    """

    def __init__(self, mode: str) -> None:
        super().__init__(cast(Any, None), cast(Any, None), cast(Any, None))
        self.mode = mode
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.applied = 0

    async def _verify(self, meta: Any, headers: Any) -> Any:
        self.started.set()
        if self.mode == "early":
            await self.release.wait()
        return SimpleNamespace(tenant="tenant:t", workspace="workspace:w", audit_id=AUDIT_ID)

    async def _call_verified(self, name: str, arguments: Any, ctx: Any, meta: Any) -> dict[str, Any]:
        if self.mode == "finish":
            with anyio.CancelScope(shield=True):
                await self.release.wait()
        elif self.mode == "interrupt":
            await anyio.sleep_forever()
        elif self.mode == "bare":
            try:
                await anyio.sleep_forever()
            except asyncio.CancelledError:
                raise asyncio.CancelledError() from None
        self.applied += 1
        return DONE


class Peer:
    def __init__(self, send: Any, receive: Any) -> None:
        self._send, self._receive = send, receive
        self._next = 0

    async def request(self, method: str, params: dict[str, Any]) -> int:
        self._next += 1
        await self._send.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=self._next, method=method,
                                                            params=params)))
        return self._next

    async def call(self) -> int:
        return await self.request("tools/call", {"name": "engram_memory_capture", "arguments": {}})

    async def cancel(self, request_id: int) -> None:
        await self._send.send(SessionMessage(JSONRPCNotification(
            jsonrpc="2.0", method="notifications/cancelled", params={"requestId": request_id, "reason": "test"})))

    async def answers(self, expected: int, settle: float = 0.2, deadline: float = 15.0) -> list[tuple[int, dict[str, Any]]]:
        """The answers that arrive until ``expected`` of them have (waiting at most ``deadline``
        seconds, so that a loaded machine does not fail the test), and any more within a further
        ``settle`` seconds (so that a duplicate answer is seen)."""
        got: list[tuple[int, dict[str, Any]]] = []

        async def collect(limit: int | None) -> None:
            while limit is None or len(got) < limit:
                message = (await self._receive.receive()).message
                if isinstance(message, JSONRPCResponse):
                    got.append((int(message.id), message.result))
                elif isinstance(message, JSONRPCError):
                    got.append((int(message.id), {"error": message.error.model_dump()}))

        with anyio.move_on_after(deadline):
            await collect(expected)
        with anyio.move_on_after(settle):
            await collect(None)
        return got


@asynccontextmanager
async def serving(dispatcher: Downstream) -> AsyncIterator[Peer]:
    """The gateway's MCP server on in-memory streams, wired as ``engram gateway --stdio`` is."""
    to_server, reads = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
    cancels = PeerCancels()
    server = build_server(dispatcher, cancels)
    async with anyio.create_task_group() as group:
        async def run() -> None:
            async with cancels.watching(reads) as noted:
                await server.run(noted, writes, server.create_initialization_options())

        group.start_soon(run)
        peer = Peer(to_server, from_server)
        await peer.request("initialize", {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                                          "clientInfo": {"name": "peer-cancel-test", "version": "0"}})
        assert len(await peer.answers(1)) == 1
        await to_server.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")))
        yield peer
        group.cancel_scope.cancel()


def envelope(result: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in result, result
    return dict(result["structuredContent"])


def is_cancelled(result: dict[str, Any]) -> bool:
    env = envelope(result)
    return (result.get("isError") is True and env["ok"] is False and env["auditId"] == AUDIT_ID
            and env["error"]["code"] == "CANCELLED" and env["error"]["retriable"] is True)


async def cancelled_call(peer: Peer, dispatcher: Downstream) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """A call cancelled once it has started, with a cancellation of it repeated and one for an
    id never sent (neither changes anything), and the answers that follow."""
    sent = await peer.call()
    await dispatcher.started.wait()
    await peer.cancel(sent)
    await anyio.sleep(0.05)
    dispatcher.release.set()
    await peer.cancel(sent)
    await peer.cancel(9999)
    return sent, await peer.answers(1, settle=0.5)


@pytest.mark.parametrize("mode", ["interrupt", "bare"])
async def test_an_interrupted_call_answers_cancelled_once_and_the_session_goes_on(mode: str) -> None:
    dispatcher = Downstream(mode)
    async with serving(dispatcher) as peer:
        sent, answers = await cancelled_call(peer, dispatcher)
        assert [rid for rid, _ in answers] == [sent]
        assert is_cancelled(answers[0][1])
        assert dispatcher.applied == 0
        dispatcher.mode = "plain"
        again = await peer.call()
        assert [(rid, envelope(result)) for rid, result in await peer.answers(1)] == [(again, DONE)]


async def test_a_cancellation_during_verification_interrupts_the_call_as_soon_as_it_is_verified() -> None:
    dispatcher = Downstream("early")
    async with serving(dispatcher) as peer:
        sent, answers = await cancelled_call(peer, dispatcher)
    assert [rid for rid, _ in answers] == [sent]
    assert is_cancelled(answers[0][1])
    assert dispatcher.applied == 0


async def test_a_call_that_finished_before_the_interruption_reached_it_answers_its_outcome_once() -> None:
    dispatcher = Downstream("finish")
    async with serving(dispatcher) as peer:
        sent, answers = await cancelled_call(peer, dispatcher)
    assert [(rid, envelope(result)) for rid, result in answers] == [(sent, DONE)]
    assert dispatcher.applied == 1


async def test_a_call_nobody_cancels_answers_once_and_a_late_cancellation_changes_nothing() -> None:
    dispatcher = Downstream("plain")
    async with serving(dispatcher) as peer:
        sent = await peer.call()
        answers = await peer.answers(1)
        await peer.cancel(sent)
        later = await peer.answers(0, settle=0.3)
    assert [(rid, envelope(result)) for rid, result in answers] == [(sent, DONE)]
    assert later == []
