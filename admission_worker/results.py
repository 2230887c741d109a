"""Wait for decision task results without blocking the event loop, on one shared connection.

The Redis result backend stores each task's result under one key and publishes it on a
channel of the same name. Every delivery of one admission's decision shares a task id
(:func:`engram_core.taskq.decision_task_id`), so whichever delivery decides, its result lands
on that key. A result holds the recorded outcome (ids, cursor, digests; never content).

One :class:`ResultListener` per admission process holds one pub/sub connection subscribed to
the pattern of every decision's channel and hands each message to the waiters of its key: a
request costs no connection and no subscribe round trip of its own. A waiter registers first
and then reads the key, so a result that lands in between is not missed; while the listener
is (re)connecting, waiters poll the key instead, so a Redis restart delays answers but loses
none.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from engram_core.background import cancel_and_wait

SUCCESS, FAILURE = "SUCCESS", "FAILURE"
# How often a waiter reads its key itself: rarely while the listener is subscribed (a safety
# net only), often while it is not (then polling is the only signal).
POLL_SUBSCRIBED_S, POLL_UNSUBSCRIBED_S = 1.0, 0.1
RECONNECT_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)

log = logging.getLogger("engram.admission.results")


class TaskFailed(Exception):
    """The task ended without a result (a permanent error, or its retries ran out)."""


def _finished(raw: bytes | str | None) -> Any | None:
    """The result of a finished task, None while it is pending or retrying."""
    if raw is None:
        return None
    meta = json.loads(raw)
    if meta.get("status") == SUCCESS:
        return meta.get("result")
    if meta.get("status") == FAILURE:
        raise TaskFailed()
    return None


async def forget_result(client: aioredis.Redis, key: bytes) -> None:
    """Drop an earlier delivery's result so that only this round's counts."""
    await client.delete(key)


class ResultListener:
    """One pattern subscription per process, fanned out to the waiters of each key."""

    def __init__(self, client: aioredis.Redis, pattern: bytes) -> None:
        self._client = client
        self._pattern = pattern
        self._waiters: dict[bytes, set[asyncio.Queue[bytes]]] = {}
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Messages delivered to waiters and (re)subscriptions made (tests and logs read them).
        self.delivered = 0
        self.subscriptions = 0

    @property
    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="decision-results")

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self._subscribed.clear()

    async def wait_until_subscribed(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._subscribed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _listen(self) -> None:
        failures = 0
        while True:
            pubsub = self._client.pubsub()
            try:
                await pubsub.psubscribe(self._pattern)
                while True:
                    message = await pubsub.get_message(timeout=POLL_SUBSCRIBED_S)
                    if message is None:
                        continue
                    if message["type"] == "psubscribe":
                        self._subscribed.set()
                        self.subscriptions += 1
                        failures = 0
                    elif message["type"] == "pmessage":
                        self._deliver(message["channel"], message["data"])
            except (RedisError, OSError) as exc:
                delay = RECONNECT_BACKOFF_S[min(failures, len(RECONNECT_BACKOFF_S) - 1)]
                if failures == 0:
                    log.warning("decision results not subscribed: %s; waiters poll meanwhile", type(exc).__name__)
                failures += 1
                await asyncio.sleep(delay)
            finally:
                self._subscribed.clear()
                try:
                    await pubsub.aclose()
                except (RedisError, OSError):
                    pass

    def _deliver(self, channel: bytes, data: bytes) -> None:
        for queue in self._waiters.get(channel, ()):
            queue.put_nowait(data)
            self.delivered += 1

    async def wait(self, key: bytes, timeout: float) -> Any | None:
        """The task's result once it succeeds, or None after ``timeout`` seconds. Raises
        :class:`TaskFailed` when it failed for good."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._waiters.setdefault(key, set()).add(queue)
        try:
            while True:
                result = _finished(await self._client.get(key))
                if result is not None:
                    return result
                while True:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return None
                    poll = POLL_SUBSCRIBED_S if self.subscribed else POLL_UNSUBSCRIBED_S
                    try:
                        data = await asyncio.wait_for(queue.get(), min(remaining, poll))
                    except TimeoutError:
                        break  # read the key again
                    result = _finished(data)
                    if result is not None:
                        return result
        finally:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(queue)
                if not waiting:
                    del self._waiters[key]
