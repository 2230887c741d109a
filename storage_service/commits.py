"""Group commit: the writes of one scope commit together instead of queueing on its head.

Every state change of a scope appends one journal event at the scope's next cursor, so all its
writers contend for one document (the scope head). Instead of a lock held for a whole
transaction per write, the writes of a scope that arrive while one group is committing queue
up and run as the *next group*: one transaction that reads the head once, runs each queued
body in arrival order (each sees the writes of the ones before it), assigns their cursors in
memory, inserts all their events with one ``insert_many`` and moves the head once. A group
costs one head read, one head write, one event insert and one durable commit however many
writes it holds, and the commit's fsync is shared.

The journal rules hold as before: cursors are dense and gap-free (an aborted group consumes
none), every event links to its predecessor's digest, and an illegal move takes no cursor. A
body that fails (a contract error such as DIGEST_CONFLICT, or a bug) fails alone: the group is
aborted and re-run without it, so its partial writes vanish with the aborted transaction. A
group that loses a race with another storage replica (a write conflict on the head) is re-run
whole by the driver's ``with_transaction``.

After a group commits, and before any of its callers gets its answer, the scope's change token
is published (``publish``: :class:`engram_core.scope_changes.ChangePublisher`), so a reader
reusing its copy of the scope's policy and head sees the change on its next call. A group
whose token cannot be published answers each of its callers ``STORE_UNAVAILABLE`` (retriable:
the writes committed, a retry replays them and publishes again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pymongo.errors import PyMongoError

from engram_core.errors import Code, EngramError
from engram_core.scope_changes import ChangeUnpublished
from storage_service.journal import GENESIS_DIGEST, Event, build_event
from storage_service.store import Scope, Session, Store

T = TypeVar("T")
log = logging.getLogger("engram.storage.commits")

# Writes per group: bounds one transaction's size and the latency the first waiter pays.
MAX_GROUP = 32


class JournalTxn:
    """What a journaled body gets: the group's session and the journal appender."""

    def __init__(self, session: Session, scope: Scope, head: int, head_digest: str) -> None:
        self.session = session
        self.scope = scope
        self._head = head
        self._digest = head_digest
        self.events: list[dict[str, Any]] = []

    @property
    def head(self) -> tuple[int, str]:
        return self._head, self._digest

    def append(self, operation: str, object_id: str, from_state: str | None, to_state: str,
               binding: dict[str, Any] | None = None) -> Event:
        """Take the next cursor for one event (written when the group commits). ``binding``:
        extra digests/ids the event commits to; never content."""
        document, event = build_event(self.scope, self._head + 1, self._digest, operation, object_id, from_state,
                                      to_state, binding)
        self.events.append(document)
        self._head, self._digest = event.cursor, event.event_digest
        return event


Body = Callable[[JournalTxn], Awaitable[Any]]


@dataclass
class _Waiting:
    body: Body
    future: asyncio.Future[Any]


class _BodyFailed(Exception):
    """Raised out of a group transaction (which aborts it) when one of its bodies failed."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(index)
        self.index, self.error = index, error


class GroupCommitter:
    """Runs journaled transaction bodies, grouped per scope (see the module docstring)."""

    def __init__(self, store: Store, max_group: int = MAX_GROUP,
                 publish: Callable[[str], Awaitable[None]] | None = None) -> None:
        """``publish``: writes the scope's change token (by scope digest) after each committed
        group; None only where no reader reuses copies (tests of the storage logic alone)."""
        self._store = store
        self._max_group = max_group
        self.publish = publish
        self._queues: dict[str, list[_Waiting]] = {}
        self._draining: dict[str, asyncio.Task[None]] = {}
        # Committed groups and the bodies they held (bench and tests read the ratio).
        self.groups_committed = 0
        self.bodies_committed = 0

    async def run(self, scope: Scope, body: Callable[[JournalTxn], Awaitable[T]]) -> T:
        """Run ``body`` in the scope's next group; its result once the group committed."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(scope.key, []).append(_Waiting(body, future))
        if scope.key not in self._draining:
            self._draining[scope.key] = asyncio.create_task(self._drain(scope), name=f"commits-{scope.key[:15]}")
        return await future

    async def _drain(self, scope: Scope) -> None:
        try:
            while True:
                queue = self._queues.get(scope.key)
                if not queue:
                    return
                group, self._queues[scope.key] = queue[:self._max_group], queue[self._max_group:]
                await self._commit_group(scope, group)
        finally:
            self._draining.pop(scope.key, None)
            if not self._queues.get(scope.key):
                self._queues.pop(scope.key, None)
            elif scope.key not in self._draining:  # a body queued while this task was ending
                self._draining[scope.key] = asyncio.create_task(self._drain(scope))

    async def _commit_group(self, scope: Scope, group: list[_Waiting]) -> None:
        live = [w for w in group if not w.future.done()]  # a caller that gave up is not run
        while live:
            try:
                results = await self._store.transaction(lambda session: self._group_body(session, scope, live))
            except _BodyFailed as failed:
                waiting = live.pop(failed.index)
                if not waiting.future.done():
                    waiting.future.set_exception(failed.error)
                continue
            except BaseException as exc:  # noqa: BLE001 - the group's failure is each waiter's
                for waiting in live:
                    if not waiting.future.done():
                        waiting.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                return
            self.groups_committed += 1
            self.bodies_committed += len(live)
            if self.publish is not None:
                try:
                    await self.publish(scope.key)
                except BaseException as exc:  # noqa: BLE001 - committed, but no caller may be told yet
                    log.warning("scope change not published scope=%s bodies=%d", scope.key, len(live))
                    for waiting in live:
                        if not waiting.future.done():
                            waiting.future.set_exception(EngramError(Code.STORE_UNAVAILABLE))
                    if not isinstance(exc, ChangeUnpublished):
                        raise
                    return
            for waiting, result in zip(live, results):
                if not waiting.future.done():
                    waiting.future.set_result(result)
            return

    async def _group_body(self, session: Session, scope: Scope, live: list[_Waiting]) -> list[Any]:
        store = self._store
        head = await store.scopes.find_one({"_id": scope.key}, session=session)
        # The scope document may exist before its first event (it also holds the policy).
        txn = JournalTxn(session, scope, int(head.get("head", 0)) if head else 0,
                         (head.get("head_digest") if head else None) or GENESIS_DIGEST)
        results = []
        for index, waiting in enumerate(live):
            try:
                results.append(await waiting.body(txn))
            except PyMongoError:
                raise  # the driver retries or fails the whole group
            except Exception as exc:  # noqa: BLE001 - this body fails alone
                raise _BodyFailed(index, exc) from None
        if txn.events:
            await store.journal.insert_many(txn.events, session=session)
            cursor, event_digest = txn.head
            await store.scopes.update_one({"_id": scope.key}, {"$set": {"head": cursor, "head_digest": event_digest}},
                                          upsert=head is None, session=session)
        return results
