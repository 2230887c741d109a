"""The expiry sweep (SPEC §6: ``expire`` by the sweeper when ``expires_at`` ≤ now).

:meth:`Sweeper.sweep` walks the records whose ``expires_ms`` has passed on storage's clock
(``Deps.clock``, injectable), oldest first, at most ``limit`` per call, and moves each through
the transition engine as ``expire`` by the actor ``sweeper``: one journal event per record, its
derivative rule applied (:mod:`storage_service.expiry`: the data key destroyed unless
``retain``), and, for a current record, an invalidation of every search replica. A record moved
meanwhile (forgotten, disputed and expired by an operator) is skipped, never an error; the
sweep is idempotent, so two sweepers racing (a beat restarted) expire each record once.
Between sweeps every read already leaves an expired record out (``eligible_now``).

The worker's ``engram.records.expire`` task (scheduled by ``engram beat``) calls it through
``StorageService.SweepExpired`` until nothing more is due.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from engram_core.errors import Code, EngramError
from storage_service.commits import JournalTxn
from storage_service.deps import Deps
from storage_service.expiry import EXPIRES_MS, SWEPT_STATES
from storage_service.store import Scope
from storage_service.transitions import Transitions

ACTOR = "sweeper"
MAX_SWEEP = 1000
log = logging.getLogger("engram.storage.sweeper")


@dataclass(frozen=True)
class Swept:
    expired: int  # records this call moved to ``expired``
    skipped: int  # due records another move got to first
    more: bool  # as many were due as the limit: call again


class Sweeper:
    def __init__(self, deps: Deps) -> None:
        self._d = deps
        self._moves = Transitions(deps)

    async def sweep(self, limit: int = MAX_SWEEP) -> Swept:
        if not 1 <= limit <= MAX_SWEEP:
            raise EngramError(Code.INVALID_SCHEMA)
        d = self._d
        now = d.clock()
        due = [doc async for doc in d.store.records.find(
            {EXPIRES_MS: {"$lte": now}}, {"tenant": 1, "workspace": 1, "expires_at": 1},
        ).sort(EXPIRES_MS, 1).limit(limit)]
        results = await asyncio.gather(*(self._expire(doc) for doc in due), return_exceptions=True)
        skipped: list[str] = []
        for doc, result in zip(due, results):
            if isinstance(result, EngramError) and result.code in (Code.ILLEGAL_TRANSITION, Code.ALREADY_TERMINAL,
                                                                   Code.NOT_FOUND):
                skipped.append(doc["_id"])
            elif isinstance(result, BaseException):
                raise result  # the store is unavailable: the task retries the whole sweep
        if skipped:
            # Moved out of reach meanwhile: no longer the sweeper's (a repeat would find them again).
            await d.store.records.update_many({"_id": {"$in": skipped}, "state": {"$nin": sorted(SWEPT_STATES)}},
                                              {"$unset": {EXPIRES_MS: ""}})
        expired = len(due) - len(skipped)
        if expired:
            d.on_commit()
            log.info("sweep expired %d records", expired, extra={"expired": expired, "skipped": len(skipped)})
        return Swept(expired, len(skipped), len(due) == limit)

    async def _expire(self, doc: dict[str, Any]) -> int:
        scope = Scope(doc["tenant"], doc["workspace"])

        async def body(txn: JournalTxn) -> int:
            moved = await self._moves.move(txn, doc["_id"], "expire", {"actor": ACTOR, "expires_at": doc["expires_at"]})
            return moved.event.cursor

        return await self._d.commits.run(scope, body)
