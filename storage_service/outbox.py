"""The transactional outbox and its relay to Celery.

A state change that needs an asynchronous effect (decide an admission, destroy a data key,
invalidate projections) writes an outbox row in its own transaction. The relay publishes due
rows as Celery tasks whose only argument is an id (the outbox id, or the admission request id
for a decision), then marks them sent. A row is ``done`` only when its effect is recorded in
storage (the decision committed, the key destroyed, the coverage recorded), never merely when
it was published: a task lost with its broker or its worker is published again, after
``resend_after`` seconds, doubling per delivery up to ``resend_max``, until ``max_attempts``
deliveries; then the row is marked ``dead`` and logged for the operator. A decision's row is
deleted in the transaction that records the decision (the outcome is kept on the candidate);
the others stay ``done`` with their receipts, which replays report. A crash between
publish and mark only causes a duplicate delivery, which the idempotent tasks absorb.

Every storage replica runs a relay. A relay first *claims* a due row — a conditional update
that moves its ``next_attempt_at`` a lease ahead, matching only while the row is as it read
it — and publishes only what it claimed, so one replica publishes each delivery; a relay that
dies holding a claim leaves the row due again when the lease ends. A decision that stays owed
through every delivery (a poison candidate: its task fails or kills its worker each time) is
not left pending: ``on_dead_decision`` holds it for an operator (``decision_failed``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import Celery

from engram_core.background import cancel_and_wait
from engram_core.ids import b32
from engram_core.taskq import DECIDE_ADMISSION, decision_task_id
from storage_service.store import Scope, Session, Store

log = logging.getLogger("engram.storage.outbox")

PENDING, SENT, DONE, DEAD = "pending", "sent", "done", "dead"
RELAY_BATCH = 100
# How long a relay's claim on a row lasts before another relay may publish it.
LEASE_SECONDS = 30.0
# ``next_attempt_at`` exists only while a row is owed (pending or sent): its sparse index then
# holds the owed rows alone, and the relay's query examines the due ones only, however many
# finished rows the collection keeps.
NOT_DUE = {"next_attempt_at": ""}


def new_outbox_id() -> str:
    return "obx_" + b32(os.urandom(16))


async def enqueue(store: Store, session: Session, task: str, scope: Scope, object_id: str, *,
                  arg: str = "", sent_by_caller_for: float = 0.0) -> str:
    """Write an outbox row in ``session``'s transaction; returns its id. ``arg``: the task's
    argument when it is not the outbox id. ``sent_by_caller_for``: the caller publishes the
    task itself at once (the admission fast path); the relay publishes it only if its effect
    is not recorded after that many seconds."""
    outbox_id = new_outbox_id()
    now = datetime.now(timezone.utc)
    caller_sends = sent_by_caller_for > 0
    await store.outbox.insert_one(
        {
            "_id": outbox_id,
            "task": task,
            "scope": scope.key,
            # The scope in clear is needed by the task (search invalidation is per scope).
            "tenant": scope.tenant,
            "workspace": scope.workspace,
            "object_id": object_id,
            **({"arg": arg} if arg else {}),
            "state": SENT if caller_sends else PENDING,
            "attempts": 1 if caller_sends else 0,
            "created_at": now,
            "next_attempt_at": now + timedelta(seconds=sent_by_caller_for),
        },
        session=session,
    )
    return outbox_id


async def finish_in(store: Store, session: Session, outbox_id: str) -> None:
    """Delete a row inside the transaction that recorded its effect (a decision: what it owed
    is now the candidate's recorded outcome, and nothing reads the row again)."""
    await store.outbox.delete_one({"_id": outbox_id}, session=session)


def task_message(row: dict[str, Any]) -> tuple[str, str]:
    """The (task id, argument) a row is published with. Every delivery of a decision shares
    one task id (its result key is what the admission service waits on)."""
    if row["task"] == DECIDE_ADMISSION:
        return decision_task_id(row["arg"]), row["arg"]
    return f"{row['_id']}.{row['attempts'] + 1}", row["_id"]


async def get(store: Store, outbox_id: str) -> dict[str, Any] | None:
    return await store.outbox.find_one({"_id": outbox_id})


async def complete(store: Store, outbox_id: str, **result: Any) -> None:
    await store.outbox.update_one(
        {"_id": outbox_id}, {"$set": {"state": DONE, "done_at": datetime.now(timezone.utc), **result}, "$unset": NOT_DUE}
    )


async def find_for(store: Store, object_id: str, task: str, session: Session | None = None) -> dict[str, Any] | None:
    return await store.outbox.find_one({"object_id": object_id, "task": task}, session=session)


class Relay:
    """Publishes due outbox rows; ``wake()`` after a commit makes it run at once."""

    def __init__(self, store: Store, celery: Celery, *, interval: float, resend_after: float, max_attempts: int,
                 resend_max: float = 300.0, lease: float = LEASE_SECONDS) -> None:
        self._store = store
        self._owner = "relay_" + b32(os.urandom(10))
        self._lease = timedelta(seconds=lease)
        # Set by the server: holds a decision no delivery could make (request id).
        self.on_dead_decision: Callable[[str], Awaitable[None]] | None = None
        self._celery = celery
        self._interval = interval
        self._resend_after = resend_after
        self._resend_max = max(resend_max, resend_after)
        self._max_attempts = max_attempts
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

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

    def resend_delay(self, attempts: int) -> timedelta:
        """How long after its ``attempts + 1``-th delivery an unfinished row is published again."""
        return timedelta(seconds=min(self._resend_after * 2 ** min(attempts, 16), self._resend_max))

    async def relay_once(self) -> int:
        """Publish every due row once; returns how many were published."""
        now = datetime.now(timezone.utc)
        due = self._store.outbox.find(
            {"next_attempt_at": {"$lte": now}, "state": {"$in": [PENDING, SENT]}}
        ).sort("next_attempt_at", 1).limit(RELAY_BATCH)
        published = 0
        async for row in due:
            if not await self._claim(row, now):
                continue  # another relay claimed it first
            if row["attempts"] >= self._max_attempts:
                await self._dead(row)
                continue
            task_id, arg = task_message(row)
            try:
                await asyncio.to_thread(self._celery.send_task, row["task"], args=[arg], task_id=task_id)
            except Exception:
                # The broker is away: give the claim back so the row is due again at once, not
                # only when the lease ends (the pass fails and is logged; the next one retries).
                await self._store.outbox.update_one({"_id": row["_id"], "lease_owner": self._owner},
                                                    {"$set": {"next_attempt_at": now}, "$unset": {"lease_owner": ""}})
                raise
            await self._store.outbox.update_one(
                {"_id": row["_id"], "lease_owner": self._owner, "state": {"$in": [PENDING, SENT]}},
                {"$set": {"state": SENT, "sent_at": now, "next_attempt_at": now + self.resend_delay(row["attempts"])},
                 "$inc": {"attempts": 1}, "$unset": {"lease_owner": ""}},
            )
            published += 1
        return published

    async def _claim(self, row: dict[str, Any], now: datetime) -> bool:
        """Take ``row`` for one delivery: matches only while it is as this relay read it (a
        conditional update, not findAndModify: docs/storage.md)."""
        claimed = await self._store.outbox.update_one(
            {"_id": row["_id"], "state": row["state"], "attempts": row["attempts"],
             "next_attempt_at": row["next_attempt_at"]},
            {"$set": {"next_attempt_at": now + self._lease, "lease_owner": self._owner}},
        )
        return claimed.modified_count == 1

    async def _dead(self, row: dict[str, Any]) -> None:
        log.error("outbox row dead after %d deliveries: %s", row["attempts"], row["_id"])
        if row["task"] == DECIDE_ADMISSION and self.on_dead_decision is not None:
            # Held for an operator in the transaction that records it, which deletes the row.
            await self.on_dead_decision(row["arg"])
            return
        await self._store.outbox.update_one({"_id": row["_id"], "lease_owner": self._owner},
                                            {"$set": {"state": DEAD}, "$unset": NOT_DUE})
