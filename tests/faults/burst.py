"""A bounded burst of captures and admissions through MCP that survives a dying process.

Every operation is retried with the same idempotency key until it is acknowledged or refused
with a non-retriable code: a transport failure (the gateway was killed) reconnects, a
retriable envelope (STORE_UNAVAILABLE, MUTATION_OUTCOME_UNKNOWN, …) waits briefly and
retries. The first acknowledged answer of each operation is kept, so a test can check after
recovery that every acknowledged write is still there and that same-key retries return it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engram_cli.spawn import SpawnedStack
from engram_hostkit import HostFile
from engram_hostkit.client import EngramClient
from engram_hostkit.examples import make_capture_args, make_request_admission_args

PURPOSE = "purpose:faults"
CALL_SECONDS = 15.0


class Refused(AssertionError):
    """An operation was refused with a code that must not happen in a fault run."""


@dataclass
class Item:
    index: int
    tag: str
    capture_args: dict[str, Any]
    admission_key: str
    captured: dict[str, Any] | None = None
    admitted: dict[str, Any] | None = None

    @property
    def token(self) -> str:
        return f"{self.tag}x{self.index:04d}"


@dataclass
class Burst:
    host_file: str
    tag: str
    size: int
    concurrency: int = 4
    retries: dict[str, int] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i in range(self.size):
            token = f"{self.tag}x{i:04d}"
            text = f"Fault drill {token}: the harbour light keeper logs oil, wick and weather each night."
            self.items.append(Item(
                i, self.tag,
                make_capture_args(idempotency_key=f"flt-cap-{token}-0001", text=text, purpose_ref=PURPOSE),
                f"flt-adm-{token}-0001",
            ))

    def note(self, what: str) -> None:
        self.retries[what] = self.retries.get(what, 0) + 1

    async def run(self, deadline_seconds: float, on_progress: Callable[[int], Awaitable[None]] | None = None) -> None:
        """Drive every item to an acknowledged capture and decided admission."""
        queue: asyncio.Queue[Item] = asyncio.Queue()
        for item in self.items:
            queue.put_nowait(item)
        done = 0
        deadline = time.monotonic() + deadline_seconds

        async def worker() -> None:
            nonlocal done
            client = Reconnecting(self.host_file, self)
            try:
                while not queue.empty():
                    item = queue.get_nowait()
                    item.captured = await client.until_ok(
                        "engram_memory_capture", item.capture_args, deadline)
                    args = make_request_admission_args(item.captured["candidate_id"], item.admission_key)
                    item.admitted = await client.until_ok("engram_memory_request_admission", args, deadline)
                    done += 1
                    if on_progress is not None:
                        await on_progress(done)
            finally:
                await client.close()

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))


class Reconnecting:
    """Calls through MCP, each on a fresh connection in a task of its own: a dying gateway
    cancels only that task (the client's task group cancels the task that entered it), never
    the caller."""

    def __init__(self, host_file: str, burst: Burst) -> None:
        self._host = HostFile.load(host_file)
        self._burst = burst

    async def close(self) -> None:
        """Nothing stays open between calls."""

    async def _once(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        async with asyncio.timeout(CALL_SECONDS):
            async with EngramClient.connect(self._host, principal="user:faults", purpose_ref=PURPOSE) as client:
                return await client.call(tool, args)

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.create_task(self._once(tool, args))

    async def until_ok(self, tool: str, args: dict[str, Any], deadline: float) -> dict[str, Any]:
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"{tool} not acknowledged before the deadline; retries {self._burst.retries}")
            try:
                envelope = await self.call(tool, args)
            except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - a killed gateway, any shape
                if isinstance(exc, asyncio.CancelledError) and asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    raise
                self._burst.note(f"transport:{type(exc).__name__}")
                await asyncio.sleep(0.2)
                continue
            if envelope.get("ok"):
                return envelope["output"]["value"]
            error = envelope.get("error", {})
            if not error.get("retriable"):
                raise Refused(f"{tool} refused with {error.get('code')}")
            self._burst.note(error.get("code", "?"))
            await asyncio.sleep(0.2)


def restarted(stack: SpawnedStack, name: str, old_pid: int, timeout: float = 30.0) -> int:
    """Wait until the supervisor has a new pid for ``name``; returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = stack.state()
        pid = int(state.get("children", {}).get(name, {}).get("pid", 0))
        if pid and pid != old_pid and state.get("restarts", {}).get(name, 0) >= 1:
            return pid
        time.sleep(0.05)
    raise AssertionError(f"{name} was not restarted within {timeout:.0f}s")
