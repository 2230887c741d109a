"""Admission on the storage side (SPEC §5 request_admission, §10, §12 adjudication).

``begin`` runs the mutation gate and either returns the recorded decision or a request id for
the worker; ``open`` hands the worker the decrypted candidate with the facts storage knows
(exact duplicate, forgotten content); ``commit`` applies the worker's decision in one
transaction: the record (sealed with its own data key), the journal event, the candidate's
new state, the decision and the outbox row that destroys the candidate's data key. A
``pending_adjudication`` decision holds the candidate (pending, ciphertext kept) until an
operator ``adjudicate``s it through the same decision path; ``pending`` lists the held ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from engram_core.canonical import canonicalize
from engram_core.digests import digest, with_digest
from engram_core.errors import Code, EngramError
from engram_core.ids import new_request_id
from engram_core.policy import REVEAL, TRUST_CLASSES, ScopePolicy
from engram_core.taskq import DECIDE_ADMISSION, DECISION_FAILED
from engram_core.timefmt import format_instant, now_ms
from storage_service import outbox
from storage_service.commits import JournalTxn
from storage_service.deps import Deps
from storage_service.ledger import GateKey
from storage_service.expiry import expiry_fields
from storage_service.lifecycle import ACCEPTED, ACCEPTED_CURRENT, PENDING, REJECTED, WITHDRAWN, transition
from storage_service.receipts import transaction_receipt_digest
from storage_service.records import projection, record_content
from storage_service.store import Scope, Session
from storage_service.vault import CANDIDATE, RECORD

REQUEST_ADMISSION = "engram_memory_request_admission"
DECISIONS = ("accept", "reject", "pending_adjudication", "duplicate_exact")
STATUS = {"accept": "accepted", "reject": "rejected", "pending_adjudication": "pending_adjudication",
          "duplicate_exact": "duplicate_exact"}
OPERATION = {"accept": "accept", "reject": "reject", "pending_adjudication": "hold", "duplicate_exact": "duplicate"}
# Request ids whose scope this process remembers (a request's scope never changes; a miss
# costs one indexed read).
SCOPE_CACHE_SIZE = 4096
# An operator's adjudication of a held candidate, and the constant reason it records.
ADJUDICATIONS = ("accept", "reject")
ADJUDICATED = "operator_adjudication"
MAX_PENDING_PAGE = 1000

log = logging.getLogger("engram.storage.admission")


@dataclass(frozen=True)
class Begun:
    outcome_json: bytes = b""
    request_id: str = ""
    # This call made the request (its caller publishes the decision task; every other same-
    # candidate call waits for that one's decision instead of publishing a duplicate).
    fresh: bool = False


@dataclass(frozen=True)
class Opened:
    payload: dict[str, Any]
    evidence: dict[str, Any]
    policy: ScopePolicy
    duplicate_of_record_id: str
    matches_forgotten: bool
    outcome_json: bytes = b""
    scope: Scope | None = None


def _scope(doc: dict[str, Any]) -> Scope:
    return Scope(doc["tenant"], doc["workspace"])


class Admissions:
    def __init__(self, deps: Deps) -> None:
        self._d = deps
        self._scopes: OrderedDict[str, Scope] = OrderedDict()

    def _remember(self, request_id: str, scope: Scope) -> None:
        self._scopes[request_id] = scope
        self._scopes.move_to_end(request_id)
        while len(self._scopes) > SCOPE_CACHE_SIZE:
            self._scopes.popitem(last=False)

    async def _scope_of(self, request_id: str) -> Scope:
        scope = self._scopes.get(request_id)
        if scope is None:
            scope = _scope(await self._by_request(request_id))
            self._remember(request_id, scope)
        return scope

    async def begin(self, key: GateKey, candidate_id: str) -> Begun:
        d, scope = self._d, key.scope

        async def body(session: Session) -> Begun:
            entry = await d.ledger.lookup(session, key)
            candidate = await d.store.candidates.find_one(
                {"_id": candidate_id, "scope": scope.key}, {"state": 1, "outcome": 1, "admission_request_id": 1},
                session=session,
            )
            if candidate is None:
                raise EngramError(Code.NOT_FOUND)
            if candidate["state"] == WITHDRAWN:
                raise EngramError(Code.ALREADY_TERMINAL)
            if entry is None:
                await d.ledger.record(session, key, REQUEST_ADMISSION, object_id=candidate_id)
            if candidate.get("outcome"):
                return Begun(outcome_json=bytes(candidate["outcome"]))
            request_id = candidate.get("admission_request_id") or new_request_id()
            fresh = "admission_request_id" not in candidate
            if fresh:
                # The decision task is owed from now on: its outbox row makes the relay publish
                # it again if the admission service's own publish is lost (or never happens).
                decide_outbox_id = await outbox.enqueue(
                    d.store, session, DECIDE_ADMISSION, scope, candidate_id, arg=request_id,
                    sent_by_caller_for=d.decision_backstop_seconds)
                await d.store.candidates.update_one(
                    {"_id": candidate_id},
                    {"$set": {"admission_request_id": request_id, "decide_outbox_id": decide_outbox_id}},
                    session=session)
            return Begun(request_id=request_id, fresh=fresh)

        begun = await d.store.transaction(body)
        if begun.request_id:
            self._remember(begun.request_id, scope)
        return begun

    async def _by_request(self, request_id: str, session: Session | None = None) -> dict[str, Any]:
        candidate = await self._d.store.candidates.find_one({"admission_request_id": request_id}, session=session)
        if candidate is None or not request_id:
            raise EngramError(Code.NOT_FOUND)
        return candidate

    async def open(self, request_id: str) -> Opened:
        d = self._d
        candidate = await self._by_request(request_id)
        if candidate.get("outcome"):
            return Opened({}, {}, ScopePolicy(), "", False, bytes(candidate["outcome"]))
        if candidate["state"] != PENDING:
            raise EngramError(Code.ALREADY_TERMINAL)
        scope = _scope(candidate)
        self._remember(request_id, scope)
        # Four independent indexed reads, issued together (one round trip of latency).
        plaintext, duplicate, policy, forgotten = await asyncio.gather(
            d.vault.open(scope, candidate["_id"], CANDIDATE, candidate["blob"]),
            d.store.records.find_one(
                {"scope": scope.key, "payload_digest": candidate["payload_digest"], "state": ACCEPTED_CURRENT},
                {"_id": 1}),
            d.policies.get(scope),
            d.matches_forgotten(scope, candidate["payload_digest"]),
        )
        data = json.loads(plaintext)
        return Opened(data["payload"], data["evidence"], policy, duplicate["_id"] if duplicate else "", forgotten,
                      scope=scope)

    async def commit(self, request_id: str, decision: str, reason: str, trust: str) -> bytes:
        """Apply the decision (once); returns the recorded outcome (canonical JSON)."""
        if decision not in DECISIONS or trust not in TRUST_CLASSES or not reason or len(reason) > 128:
            raise EngramError(Code.INVALID_SCHEMA)
        d = self._d

        async def body(txn: JournalTxn) -> bytes:
            candidate = await self._by_request(request_id, txn.session)
            if candidate.get("outcome"):
                return bytes(candidate["outcome"])
            return await self._decide(txn, candidate, decision, reason, trust, {})

        outcome_json = await d.commits.run(await self._scope_of(request_id), body)
        d.on_commit()
        return outcome_json

    async def hold_undecidable(self, request_id: str) -> None:
        """Hold a candidate no delivery of its decision task could decide (a poison: the task
        failed or killed its worker every time) for an operator, reason ``decision_failed``;
        ``engram admin pending`` lists it and ``adjudicate`` decides it."""
        try:
            await self.commit(request_id, "pending_adjudication", DECISION_FAILED, "asserted")
        except EngramError as exc:
            log.error("an undecidable candidate could not be held: %s", exc.code.value)

    async def pending(self, scope: Scope, limit: int, after: str = "") -> list[dict[str, Any]]:
        """The scope's candidates waiting for an operator (``pending_adjudication``), by id after
        ``after``: metadata only — ids, digests, cursor, time and the constant reason — never
        their plaintext."""
        if not 1 <= limit <= MAX_PENDING_PAGE:
            raise EngramError(Code.INVALID_SCHEMA)
        query: dict[str, Any] = {"scope": scope.key, "state": PENDING, "outcome": {"$exists": True}}
        if after:
            query["_id"] = {"$gt": after}
        fields = {"_id": 1, "record_digest": 1, "captured_cursor": 1, "created_at": 1, "decision_reason": 1}
        found = []
        async for doc in self._d.store.candidates.find(query, fields).sort("_id", 1).limit(limit):
            found.append({"candidate_id": doc["_id"], "record_digest": doc["record_digest"],
                          "captured_cursor": str(doc["captured_cursor"]), "reason": doc.get("decision_reason", ""),
                          "captured_at": format_instant(int(doc["created_at"].timestamp() * 1000))})
        return found

    async def adjudicate(self, scope: Scope, candidate_id: str, decision: str, reason_ref: str) -> bytes:
        """An operator's decision on a held candidate (accept or reject); the recorded outcome,
        which the agent's next request_admission for it returns."""
        if decision not in ADJUDICATIONS or not candidate_id:
            raise EngramError(Code.INVALID_SCHEMA)
        d = self._d
        binding = {"actor": "operator", "reason_digest": digest("operation", {"reason_ref": reason_ref})}

        async def body(txn: JournalTxn) -> bytes:
            candidate = await d.store.candidates.find_one({"_id": candidate_id, "scope": scope.key},
                                                          session=txn.session)
            if candidate is None:
                raise EngramError(Code.NOT_FOUND)
            if candidate["state"] in (REJECTED, WITHDRAWN):
                raise EngramError(Code.ALREADY_TERMINAL)
            if candidate["state"] != PENDING or not candidate.get("outcome"):
                # Decided already, or not waiting for an operator (the worker decides it).
                raise EngramError(Code.ILLEGAL_TRANSITION)
            return await self._decide(txn, candidate, decision, ADJUDICATED, "asserted", binding)

        outcome_json = await d.commits.run(scope, body)
        d.on_commit()
        return outcome_json

    async def reveal(self, scope: Scope, candidate_id: str, reason_ref: str) -> dict[str, Any]:
        """A held candidate's plaintext for an operator, where the scope's policy permits reveals
        (``reveal_pending``, itself a journaled change): the reveal is a journal event (actor,
        the reason's digest) committed before anything is decrypted; UNAUTHORIZED without the
        permission, nothing journaled."""
        if not candidate_id:
            raise EngramError(Code.INVALID_SCHEMA)
        d = self._d
        binding = {"actor": "operator", "reason_digest": digest("operation", {"reason_ref": reason_ref})}

        async def body(txn: JournalTxn) -> tuple[dict[str, Any], int]:
            if not (await d.policies.read_in(txn)).reveal_pending:
                raise EngramError(Code.UNAUTHORIZED)
            candidate = await d.store.candidates.find_one({"_id": candidate_id, "scope": scope.key},
                                                          {"state": 1, "outcome": 1, "blob": 1}, session=txn.session)
            if candidate is None:
                raise EngramError(Code.NOT_FOUND)
            if candidate["state"] in (REJECTED, WITHDRAWN):
                raise EngramError(Code.ALREADY_TERMINAL)
            if candidate["state"] != PENDING or not candidate.get("outcome"):
                raise EngramError(Code.ILLEGAL_TRANSITION)  # only what waits for an operator
            event = txn.append(REVEAL, candidate_id, PENDING, PENDING, binding)
            return candidate, event.cursor

        candidate, cursor = await d.commits.run(scope, body)
        data = json.loads(await d.vault.open(scope, candidate_id, CANDIDATE, candidate["blob"]))
        return {"candidate_id": candidate_id, "cursor": str(cursor), "payload": data["payload"],
                "evidence": data["evidence"]}

    async def _decide(self, txn: JournalTxn, candidate: dict[str, Any], decision: str, reason: str, trust: str,
                      binding: dict[str, Any]) -> bytes:
        """Apply one decision to a pending candidate in ``txn`` (the worker's, or an operator's
        adjudication with its ``binding``); returns the recorded outcome."""
        d, session = self._d, txn.session
        scope = _scope(candidate)
        verdict, record_id, record_doc = decision, "", None
        if verdict in ("accept", "duplicate_exact"):
            duplicate = await d.store.records.find_one(
                {"scope": scope.key, "payload_digest": candidate["payload_digest"], "state": ACCEPTED_CURRENT},
                {"_id": 1}, session=session)
            if duplicate is not None:
                verdict, record_id = "duplicate_exact", duplicate["_id"]
            elif verdict == "duplicate_exact":
                # The duplicate left accepted_current meanwhile: let the worker decide anew.
                raise EngramError(Code.POLICY_STALE)
        decided_at = format_instant(now_ms())
        to_state = {"accept": ACCEPTED_CURRENT, "pending_adjudication": PENDING}.get(verdict, REJECTED)
        transition(OPERATION[verdict], candidate["state"])
        if verdict == "accept":
            data = json.loads(await d.vault.open(scope, candidate["_id"], CANDIDATE, candidate["blob"], session))
            content = record_content(data["payload"], data["evidence"], candidate["_id"])
            record_doc = projection(content, trust=trust, recorded_at=decided_at)
            record_id = record_doc["record_id"]
        event = txn.append(
            OPERATION[verdict], record_id if verdict == "accept" else candidate["_id"],
            PENDING, to_state, {"candidate_id": candidate["_id"], "decision": verdict, "reason": reason, **binding},
        )
        receipt = with_digest("decision", {
            "candidate_id": candidate["_id"], "status": STATUS[verdict], "reason": reason, "trust": trust,
            **({"record_id": record_id} if record_id else {}), "cursor": event.cursor_text,
            "event_digest": event.event_digest, "decided_at": decided_at,
        }, "receipt_digest")
        if record_doc is not None:
            await self._insert_record(session, scope, record_doc, candidate, event.cursor)
        outcome = {
            "status": STATUS[verdict], "candidate_id": candidate["_id"],
            **({"record_id": record_id} if record_id else {}), "cursor": event.cursor_text,
            "decision_receipt_digest": receipt["receipt_digest"],
            "transaction_receipt_digest": transaction_receipt_digest(scope, event, receipt["receipt_digest"]),
        }
        outcome_json = canonicalize(outcome)
        new_state = {"accept": ACCEPTED, "pending_adjudication": PENDING}.get(verdict, REJECTED)
        # Decided for good: the candidate's ciphertext can never be admitted again, so it is
        # dropped with the decision and its data key destroyed in the same transaction (the
        # content lives on, if accepted, in the record under its own key); a held one keeps both.
        update: dict[str, Any] = {"$set": {"state": new_state, "outcome": outcome_json, "decision_reason": reason}}
        if verdict != "pending_adjudication":
            update["$unset"] = {"blob": ""}
        await d.store.candidates.update_one({"_id": candidate["_id"], "state": PENDING}, update, session=session)
        if candidate.get("decide_outbox_id"):
            await outbox.finish_in(d.store, session, candidate["decide_outbox_id"])
        if verdict != "pending_adjudication":
            await d.vault.destroy(candidate["_id"], scope.key, session=session)
        return outcome_json

    async def _insert_record(self, session: Session, scope: Scope, record: dict[str, Any],
                             candidate: dict[str, Any], cursor: int) -> None:
        d = self._d
        content = {k: v for k, v in record.items() if k not in ("record_id", "record_digest", "trust", "recorded_at")}
        blob = await d.vault.seal(session, scope, record["record_id"], RECORD, canonicalize(content))
        retention = content.get("retention") or {}
        await d.store.records.insert_one(
            {
                "_id": record["record_id"],
                "scope": scope.key,
                "tenant": scope.tenant,
                "workspace": scope.workspace,
                "state": ACCEPTED_CURRENT,
                "blob": blob,
                "payload_digest": candidate["payload_digest"],
                "record_digest": record["record_digest"],
                "candidate_id": candidate["_id"],
                "trust": record["trust"],
                "recorded_at": record["recorded_at"],
                "valid_time": content["valid_time"],
                **expiry_fields(retention),
                "accepted_cursor": cursor,
            },
            session=session,
        )
