"""Wait for a Celery task to finish without blocking the event loop.

The Redis result backend stores ``celery-task-meta-<id>`` and publishes on a channel of the
same name; we subscribe first, then look, so a result that lands in between is not missed.
The result is only a signal: the decision itself is read back from storage.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

RESULT_KEY_PREFIX = "celery-task-meta-"


async def wait_for_result(client: aioredis.Redis, task_id: str, timeout: float) -> bool:
    """True when the task's result exists within ``timeout`` seconds."""
    key = RESULT_KEY_PREFIX + task_id
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(key)
        if await client.exists(key):
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (remaining := deadline - loop.time()) > 0:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(remaining, 1.0))
            if message is not None or await client.exists(key):
                return True
        return False
    finally:
        await pubsub.aclose()
