"""The transactional outbox and its relay to Celery.

A state change that needs an asynchronous effect (destroy a data key, invalidate projections)
writes an outbox row in its own transaction. The relay publishes pending rows as Celery tasks
whose only argument is the outbox id, then marks them sent. A crash between publish and mark
only causes a duplicate delivery, which the idempotent tasks absorb. A sent row the worker has
not completed is re-sent after ``resend_after`` seconds, up to ``max_attempts`` deliveries,
then marked ``dead`` and logged for the operator.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import Celery

from engram_core.ids import b32
from storage_service.store import Scope, Session, Store

log = logging.getLogger("engram.storage.outbox")

PENDING, SENT, DONE, DEAD = "pending", "sent", "done", "dead"
RELAY_BATCH = 100


def new_outbox_id() -> str:
    return "obx_" + b32(os.urandom(16))


async def enqueue(store: Store, session: Session, task: str, scope: Scope, object_id: str) -> str:
    outbox_id = new_outbox_id()
    now = datetime.now(timezone.utc)
    await store.outbox.insert_one(
        {
            "_id": outbox_id,
            "task": task,
            "scope": scope.key,
            # The scope in clear is needed by the task (search invalidation is per scope).
            "tenant": scope.tenant,
            "workspace": scope.workspace,
            "object_id": object_id,
            "state": PENDING,
            "attempts": 0,
            "created_at": now,
            "next_attempt_at": now,
        },
        session=session,
    )
    return outbox_id


async def get(store: Store, outbox_id: str) -> dict[str, Any] | None:
    return await store.outbox.find_one({"_id": outbox_id})


async def complete(store: Store, outbox_id: str, **result: Any) -> None:
    await store.outbox.update_one(
        {"_id": outbox_id}, {"$set": {"state": DONE, "done_at": datetime.now(timezone.utc), **result}}
    )


async def find_for(store: Store, object_id: str, task: str, session: Session | None = None) -> dict[str, Any] | None:
    return await store.outbox.find_one({"object_id": object_id, "task": task}, session=session)


class Relay:
    """Publishes due outbox rows; ``wake()`` after a commit makes it run at once."""

    def __init__(self, store: Store, celery: Celery, *, interval: float, resend_after: float, max_attempts: int) -> None:
        self._store = store
        self._celery = celery
        self._interval = interval
        self._resend_after = timedelta(seconds=resend_after)
        self._max_attempts = max_attempts
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            try:
                await self.relay_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep relaying; the rows stay due
                log.error("outbox relay pass failed: %s", type(exc).__name__)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def relay_once(self) -> int:
        """Publish every due row once; returns how many were published."""
        now = datetime.now(timezone.utc)
        due = self._store.outbox.find(
            {"state": {"$in": [PENDING, SENT]}, "next_attempt_at": {"$lte": now}}
        ).sort("next_attempt_at", 1).limit(RELAY_BATCH)
        published = 0
        async for row in due:
            if row["attempts"] >= self._max_attempts:
                await self._store.outbox.update_one({"_id": row["_id"], "state": row["state"]}, {"$set": {"state": DEAD}})
                log.error("outbox row dead after %d deliveries: %s", row["attempts"], row["_id"])
                continue
            task_id = f"{row['_id']}.{row['attempts'] + 1}"
            await asyncio.to_thread(self._celery.send_task, row["task"], args=[row["_id"]], task_id=task_id)
            await self._store.outbox.update_one(
                {"_id": row["_id"], "state": {"$in": [PENDING, SENT]}},
                {"$set": {"state": SENT, "sent_at": now, "next_attempt_at": now + self._resend_after},
                 "$inc": {"attempts": 1}},
            )
            published += 1
        return published
