"""Peer cancellation over stdio: a cancelled ``tools/call`` answers ``CANCELLED`` (SPEC §2).

On ``notifications/cancelled`` the MCP SDK cancels the request's handler — so the downstream
gRPC call is cancelled with it — and never writes an answer for it. SPEC §2 wants the
``CANCELLED`` envelope (retriable) wherever the transport can still carry one. Over stdio it
can: :class:`PeerCancels` sits on the read stream in front of the SDK and notes which
in-flight ``tools/call`` ids the peer cancelled; the tool handler, cancelled, hands its
``CANCELLED`` envelope to :meth:`PeerCancels.answer`, which writes it once (shielded, bounded).
A peer that stopped waiting drops it by id (the official client does); a host that waits gets
its answer. A cancellation that lands before the context is verified is not answered (there is
no verified audit id to answer with), nor is a handler cancelled for any other reason (the
SDK itself answers a shutdown).

Over Streamable HTTP a client cancels by closing its POST: nothing can be sent there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, RequestId

# How long the answer to a cancelled call may wait for the write stream (a wedged peer must
# not hold the handler).
ANSWER_WRITE_SECONDS = 2.0

Incoming = SessionMessage | Exception


class PeerCancels:
    """Which in-flight ``tools/call`` requests the peer cancelled, and their answers."""

    def __init__(self, write: MemoryObjectSendStream[SessionMessage]) -> None:
        self._write = write
        self._in_flight: set[RequestId] = set()
        self._cancelled: set[RequestId] = set()

    def note(self, message: Any) -> None:
        """Called for each incoming message before the SDK sees it."""
        if isinstance(message, JSONRPCRequest) and message.method == "tools/call":
            self._in_flight.add(coerce_request_id(message.id))
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            rid = cancelled_request_id_from_params(message.params)
            if rid is not None and (key := coerce_request_id(rid)) in self._in_flight:
                self._cancelled.add(key)

    def finished(self, request_id: RequestId | None) -> None:
        """The handler for ``request_id`` is done (answered by the SDK or here)."""
        if request_id is not None:
            key = coerce_request_id(request_id)
            self._in_flight.discard(key)
            self._cancelled.discard(key)

    async def answer(self, request_id: RequestId | None, result: dict[str, Any]) -> bool:
        """Write ``result`` as the answer to ``request_id`` if the peer cancelled it; from a
        cancelled handler (the write is shielded from that cancellation)."""
        if request_id is None or (key := coerce_request_id(request_id)) not in self._cancelled:
            return False
        self._cancelled.discard(key)
        message = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
        with anyio.CancelScope(shield=True), anyio.move_on_after(ANSWER_WRITE_SECONDS):
            try:
                await self._write.send(SessionMessage(message=message))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return False
        return True

    @asynccontextmanager
    async def watching(self, read: MemoryObjectReceiveStream[Incoming]) -> AsyncIterator[MemoryObjectReceiveStream[Incoming]]:
        """The read stream to give the SDK: ``read``'s messages, each noted first."""
        send, receive = anyio.create_memory_object_stream[Incoming](0)

        async def pump() -> None:
            async with send:
                async for item in read:
                    if isinstance(item, SessionMessage):
                        self.note(item.message)
                    await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()
