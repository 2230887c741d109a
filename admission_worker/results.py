"""Wait for a decision task's result without blocking the event loop.

The Redis result backend stores each task's result under one key and publishes it on a
channel of the same name. Every delivery of one admission's decision shares a task id
(:func:`engram_core.taskq.decision_task_id`), so whichever delivery decides, its result lands
on that key. The waiter subscribes first and then looks, so a result that lands in between is
not missed. A result holds the recorded outcome (ids, cursor, digests; never content).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis

SUCCESS, FAILURE = "SUCCESS", "FAILURE"


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


async def wait_for_result(client: aioredis.Redis, key: bytes, timeout: float) -> Any | None:
    """The task's result once it succeeds, or None after ``timeout`` seconds. Raises
    :class:`TaskFailed` when it failed for good."""
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(key)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            result = _finished(await client.get(key))
            if result is not None:
                return result
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(remaining, 1.0))
            if message is not None:
                result = _finished(message["data"])
                if result is not None:
                    return result
    finally:
        await pubsub.aclose()
