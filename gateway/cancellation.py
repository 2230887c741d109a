"""Peer cancellation over stdio: a cancelled ``tools/call`` is answered once (SPEC §2).

Left to the MCP SDK, ``notifications/cancelled`` cancels the request's handler and the SDK
never writes an answer for it — whatever the handler came to, even when the call had already
been applied (a downstream answer can beat the interruption). SPEC §2 wants the ``CANCELLED``
envelope (retriable) wherever the transport can still carry one, and over stdio it can. So
:class:`PeerCancels` sits on the read stream in front of the SDK and keeps the peer's
cancellations of ``tools/call`` requests to itself: each such call runs its verified part in
a cancel scope of its own (:meth:`PeerCancels.scope_for`), which the peer's cancellation
cancels. The handler then returns an answer like any other, and the SDK writes it, once:

- ``CANCELLED`` (with the call's audit id) when the call was interrupted; a cancellation that
  arrives while the context is still being verified interrupts the call the moment it is, so
  nothing is done;
- the call's own envelope when it had finished before the cancellation reached it.

A cancellation for a call already answered, or for an id never sent, changes nothing; one
for any other request goes on to the SDK. A handler cancelled for any other reason (shutdown)
is the SDK's, which answers it itself.

Over Streamable HTTP a client cancels by closing its POST: nothing can be sent there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCRequest, RequestId

Incoming = SessionMessage | Exception


class PeerCancels:
    """The in-flight ``tools/call`` requests of one stdio session, and their cancel scopes."""

    def __init__(self) -> None:
        self._in_flight: set[RequestId] = set()
        self._scopes: dict[RequestId, anyio.CancelScope] = {}
        self._early: set[RequestId] = set()  # cancelled before their handler asked for a scope

    def note(self, message: Any) -> bool:
        """Called for each incoming message before the SDK sees it; False when the message is
        consumed here (a cancellation of a ``tools/call``)."""
        if isinstance(message, JSONRPCRequest) and message.method == "tools/call":
            self._in_flight.add(coerce_request_id(message.id))
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            rid = cancelled_request_id_from_params(message.params)
            key = coerce_request_id(rid) if rid is not None else None
            if key in self._in_flight:
                if (scope := self._scopes.get(key)) is not None:
                    scope.cancel()
                else:
                    self._early.add(key)
                return False
        return True

    def scope_for(self, request_id: RequestId | None) -> anyio.CancelScope | None:
        """The scope the peer's cancellation of ``request_id`` cancels (already cancelled when
        the cancellation came first); from the start of its handler."""
        if request_id is None:
            return None
        key = coerce_request_id(request_id)
        scope = anyio.CancelScope()
        if key in self._early:
            scope.cancel()
        self._scopes[key] = scope
        return scope

    def finished(self, request_id: RequestId | None) -> None:
        """The handler for ``request_id`` has its answer: a later cancellation changes nothing."""
        if request_id is not None:
            key = coerce_request_id(request_id)
            self._in_flight.discard(key)
            self._scopes.pop(key, None)
            self._early.discard(key)

    @asynccontextmanager
    async def watching(self, read: MemoryObjectReceiveStream[Incoming]) -> AsyncIterator[MemoryObjectReceiveStream[Incoming]]:
        """The read stream to give the SDK: ``read``'s messages, each noted first, without the
        cancellations consumed here."""
        send, receive = anyio.create_memory_object_stream[Incoming](0)

        async def pump() -> None:
            async with send:
                async for item in read:
                    if not isinstance(item, SessionMessage) or self.note(item.message):
                        await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            try:
                yield receive
            finally:
                group.cancel_scope.cancel()
