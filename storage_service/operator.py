"""The operator's lifecycle moves on records (SPEC §6, §12), each through the transition engine.

dispute, resolve_dispute (to ``accepted_current`` or ``historical``), supersede (by another
current record of the scope: the link ``superseded_by`` is what a rewind follows),
mark_non_current, rewind (the record becomes current again and the record that superseded it,
if still current, becomes historical in the same transaction), expire, trust_invalidate and
tombstone. And the rebuild of a scope's search projection (:meth:`OperatorMoves.rebuild_projection`).
Each is one journal event (two for a rewind that restores a link) bound to the
operator actor and the digest of the reason — never content — with the engine's effects: a
record leaving ``accepted_current`` is removed from search and get at once (both read the
state; replicas also get an invalidation), expire and tombstone destroy its data key, tombstone
adds it to the forgotten set.

No agent can reach these: they are AdminService methods, which want the operator identity and
the operator's bearer token (engram_core.access, storage_service.admin).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engram_core.digests import digest, operation_digest
from engram_core.errors import Code, EngramError
from engram_core.host_context import ClaimError, check_text
from engram_core.policy import PROJECTION_OBJECT_ID, PROJECTION_REBUILD
from engram_core.taskq import INVALIDATE_PROJECTION
from storage_service import outbox
from storage_service.commits import JournalTxn
from storage_service.deps import Deps
from storage_service.lifecycle import ACCEPTED_CURRENT
from storage_service.receipts import transaction_receipt_digest
from storage_service.store import Scope
from storage_service.transitions import Moved, Transitions

OPERATOR_MOVES = ("dispute", "resolve_dispute", "supersede", "mark_non_current", "rewind", "expire",
                  "trust_invalidate", "tombstone")
ACTOR = "operator"
MAX_WAIT_SECONDS = 60.0
WAIT_POLL_SECONDS = 0.1


def check_ref(value: str) -> str:
    """An opaque reference (SPEC §3: non-empty NFC, ≤ 512 UTF-8 bytes), or INVALID_SCHEMA."""
    try:
        return check_text(value, "reason_ref")
    except ClaimError:
        raise EngramError(Code.INVALID_SCHEMA) from None


class OperatorMoves:
    def __init__(self, deps: Deps) -> None:
        self._d = deps
        self._moves = Transitions(deps)

    async def move(self, scope: Scope, record_id: str, operation: str, reason_ref: str, *,
                   to_state: str = "", related_id: str = "") -> dict[str, Any]:
        """Apply one operator move; the answer ``{receipt, related?}`` (ids, states, digests)."""
        if operation not in OPERATOR_MOVES or not record_id:
            raise EngramError(Code.INVALID_SCHEMA)
        check_ref(reason_ref)
        if (related_id and operation not in ("supersede", "rewind")) or (operation == "supersede" and not related_id):
            raise EngramError(Code.INVALID_SCHEMA)
        if related_id == record_id or (to_state and operation != "resolve_dispute"):
            raise EngramError(Code.INVALID_SCHEMA)
        arguments = {"record_id": record_id, "operation": operation, "reason_ref": reason_ref,
                     **({"to_state": to_state} if to_state else {}), **({"related_id": related_id} if related_id else {})}
        op_digest = operation_digest("admin.transition_record", arguments)
        binding = {"actor": ACTOR, "reason_digest": digest("operation", {"reason_ref": reason_ref}),
                   "operation_digest": op_digest}

        async def body(txn: JournalTxn) -> dict[str, Any]:
            related: Moved | None = None
            if operation == "supersede":
                await self._require_current(txn, related_id)
                moved = await self._moves.move(txn, record_id, operation, {**binding, "superseded_by": related_id},
                                               extra={"superseded_by": related_id})
            elif operation == "rewind":
                moved = await self._moves.move(txn, record_id, operation, binding, fields=("superseded_by",),
                                               extra={"superseded_by": None})
                successor = related_id or moved.document.get("superseded_by") or ""
                if successor and await self._is_current(txn, successor):
                    related = await self._moves.move(txn, successor, "supersede",
                                                     {**binding, "superseded_by": record_id},
                                                     extra={"superseded_by": record_id})
            else:
                moved = await self._moves.move(txn, record_id, operation, binding, to_state=to_state or None)
            answer: dict[str, Any] = {"receipt": self._receipt(txn, moved, op_digest)}
            if related is not None:
                answer["related"] = self._receipt(txn, related, op_digest)
            return answer

        answer = await self._d.commits.run(scope, body)
        self._d.on_commit()
        return answer

    async def rebuild_projection(self, scope: Scope, reason_ref: str, wait_seconds: float = 0.0) -> dict[str, Any]:
        """Drop the scope's search projection on every search replica: one journal event
        (``projection_rebuild`` on the object ``projection``, bound to the operator actor and
        the reason's digest) and an invalidation outbox row the worker fans out to every
        replica; each replica rebuilds the scope from the journal on its next search. Waits up
        to ``wait_seconds`` for every replica's acknowledgement; the answer says whether it came
        (``projection_invalidation: complete``, with the replicas and the coverage receipt) or
        is still owed (``pending``: the worker retries until every replica has answered)."""
        check_ref(reason_ref)
        if not 0.0 <= wait_seconds <= MAX_WAIT_SECONDS:
            raise EngramError(Code.INVALID_SCHEMA)
        op_digest = operation_digest("admin.rebuild_projection", {"reason_ref": reason_ref})
        binding = {"actor": ACTOR, "reason_digest": digest("operation", {"reason_ref": reason_ref}),
                   "operation_digest": op_digest}

        async def body(txn: JournalTxn) -> tuple[dict[str, Any], str]:
            if txn.head[0] == 0:
                raise EngramError(Code.NOT_FOUND)  # a scope that never held anything
            event = txn.append(PROJECTION_REBUILD, PROJECTION_OBJECT_ID, None, PROJECTION_REBUILD, binding)
            outbox_id = await outbox.enqueue(self._d.store, txn.session, INVALIDATE_PROJECTION, txn.scope,
                                             PROJECTION_OBJECT_ID)
            return {"event_id": event.event_id, "operation": PROJECTION_REBUILD, "cursor": event.cursor_text,
                    "event_digest": event.event_digest,
                    "transaction_receipt_digest": transaction_receipt_digest(txn.scope, event, op_digest)}, outbox_id

        receipt, outbox_id = await self._d.commits.run(scope, body)
        self._d.on_commit()
        answer: dict[str, Any] = {"receipt": receipt, "projection_invalidation": "pending"}
        deadline = time.monotonic() + wait_seconds
        while True:
            row = await self._d.store.outbox.find_one({"_id": outbox_id}, {"coverage_receipt_digest": 1, "replicas": 1})
            if row is not None and row.get("coverage_receipt_digest"):
                answer.update(projection_invalidation="complete", replicas=row.get("replicas", []),
                              coverage_receipt_digest=row["coverage_receipt_digest"])
                return answer
            if time.monotonic() >= deadline:
                return answer
            await asyncio.sleep(min(WAIT_POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    async def _is_current(self, txn: JournalTxn, record_id: str) -> bool:
        doc = await self._d.store.records.find_one({"_id": record_id, "scope": txn.scope.key}, {"state": 1},
                                                   session=txn.session)
        return doc is not None and doc["state"] == ACCEPTED_CURRENT

    async def _require_current(self, txn: JournalTxn, record_id: str) -> None:
        """A supersession names a current record of the same scope as the successor."""
        if not await self._is_current(txn, record_id):
            raise EngramError(Code.ILLEGAL_TRANSITION)

    @staticmethod
    def _receipt(txn: JournalTxn, moved: Moved, op_digest: str) -> dict[str, Any]:
        event = moved.event
        return {
            "record_id": moved.object_id,
            "event_id": event.event_id,
            "operation": moved.operation,
            "from_state": moved.from_state,
            "to_state": moved.to_state,
            "cursor": event.cursor_text,
            "event_digest": event.event_digest,
            "transaction_receipt_digest": transaction_receipt_digest(txn.scope, event, op_digest),
        }
