"""The agent-facing mutations owned by storage: capture, withdraw, forget (SPEC §5, §7).

Each runs in one MongoDB transaction: the mutation gate (ledger lookup), the lifecycle check
(before a cursor is taken), the state change, its journal event, its outbox rows and the
ledger entry with the answer. A replay returns the stored answer; live statuses
(``key_destruction``, ``projection_invalidation``) are read fresh.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from engram_core.attestation import AttestationInvalid, verify_attestation
from engram_core.canonical import canonicalize
from engram_core.digests import digest
from engram_core.errors import Code, EngramError
from engram_core.ids import candidate_id_from_digest
from engram_core.taskq import INVALIDATE_PROJECTION
from storage_service import outbox
from storage_service.commits import JournalTxn
from storage_service.deps import Deps
from storage_service.ledger import GateKey
from storage_service.store import Scope
from storage_service.lifecycle import PENDING
from engram_core.policy import ScopePolicy
from storage_service.policy import resolve_payload
from storage_service.receipts import authorization_receipt_digest, transaction_receipt_digest
from storage_service.records import payload_digest, record_content, record_digest
from storage_service.transitions import Transitions
from storage_service.vault import CANDIDATE

log = logging.getLogger("engram.storage")

CAPTURE = "engram_memory_capture"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"


@dataclass(frozen=True)
class Outcome:
    """A mutation's answer: the tool's output value and whether it was a replay."""

    value: dict[str, Any]
    replayed: bool


def _check_attestation(scope: Scope, policy: ScopePolicy, effective: dict[str, Any], evidence: dict[str, Any]) -> None:
    """A capture carrying an attestation must carry one that verifies for this scope and this
    content under a key the operator registered: anything else is refused (INVALID_SCHEMA: the
    field's value does not resolve), never stored as a claim nobody checked. The worker verifies
    again at the decision, against the keys registered then."""
    token = evidence.get("attestation")
    if token is None:
        return
    try:
        verify_attestation(token, policy.attester_keys, tenant=scope.tenant, workspace=scope.workspace,
                           payload=effective, evidence_digest=evidence.get("evidence_digest", ""))
    except AttestationInvalid as exc:
        log.info("attestation refused: %s", exc.reason)
        raise EngramError(Code.INVALID_SCHEMA) from None


class Mutations:
    def __init__(self, deps: Deps) -> None:
        self._d = deps
        self._moves = Transitions(deps)

    async def capture(self, key: GateKey, payload: dict[str, Any], evidence: dict[str, Any],
                      policy: ScopePolicy | None = None) -> Outcome:
        """``policy``: the scope's, when the caller read it already (to authorize the call)."""
        d, scope = self._d, key.scope
        policy = policy if policy is not None else await d.policies.get(scope)
        candidate_id = candidate_id_from_digest(key.identity)

        async def body(txn: JournalTxn) -> Outcome:
            session = txn.session
            entry = await d.ledger.lookup(session, key)
            if entry is None:
                # The ledger entry may have expired while the candidate it made lives on.
                existing = await d.store.candidates.find_one({"_id": candidate_id}, {"operation_digest": 1, "answer": 1},
                                                             session=session)
                if existing is not None:
                    if existing["operation_digest"] != key.operation_digest:
                        raise EngramError(Code.DIGEST_CONFLICT)
                    entry = existing
            if entry is not None:
                return Outcome({**json.loads(entry["answer"]), "status": "duplicate_exact"}, True)
            if not policy.enabled:
                raise EngramError(Code.UNAUTHORIZED)
            effective = resolve_payload(payload, policy)
            _check_attestation(scope, policy, effective, evidence)
            content = record_content(effective, evidence, candidate_id)
            plaintext = canonicalize({"payload": effective, "evidence": evidence})
            blob = await d.vault.seal(session, scope, candidate_id, CANDIDATE, plaintext)
            event = txn.append("capture", candidate_id, None, PENDING,
                                         {"operation_digest": key.operation_digest})
            answer = {
                "status": "committed_pending",
                "candidate_id": candidate_id,
                "record_digest": record_digest(content),
                "cursor": event.cursor_text,
                "transaction_receipt_digest": transaction_receipt_digest(scope, event, key.operation_digest),
            }
            answer_json = canonicalize(answer)
            await d.store.candidates.insert_one(
                {
                    "_id": candidate_id,
                    "scope": scope.key,
                    "tenant": scope.tenant,
                    "workspace": scope.workspace,
                    "state": PENDING,
                    "blob": blob,
                    "payload_digest": payload_digest(effective),
                    "record_digest": answer["record_digest"],
                    "operation_digest": key.operation_digest,
                    "answer": answer_json,
                    "captured_cursor": event.cursor,
                    "created_at": datetime.now(timezone.utc),
                },
                session=session,
            )
            await d.ledger.record(session, key, CAPTURE, answer=answer_json)
            return Outcome(answer, False)

        return await d.commits.run(scope, body)

    async def withdraw(self, key: GateKey, candidate_id: str, reason_ref: str, confirmation_digest: str) -> Outcome:
        d, scope = self._d, key.scope

        async def body(txn: JournalTxn) -> tuple[dict[str, Any], bool]:
            entry = await d.ledger.lookup(txn.session, key)
            if entry is not None:
                return json.loads(entry["answer"]), True
            return await self._transition(txn, key, WITHDRAW, "withdraw", candidate_id, reason_ref,
                                          confirmation_digest), False

        answer, replayed = await d.commits.run(scope, body)
        d.on_commit()
        destroyed = await d.vault.destroyed(candidate_id)
        return Outcome({**answer, "replayed": replayed, "key_destruction": "complete" if destroyed else "pending"}, replayed)

    async def forget(self, key: GateKey, record_id: str, reason_ref: str, confirmation_digest: str) -> Outcome:
        d, scope = self._d, key.scope

        async def body(txn: JournalTxn) -> tuple[dict[str, Any], bool]:
            entry = await d.ledger.lookup(txn.session, key)
            if entry is not None:
                return json.loads(entry["answer"]), True
            return await self._transition(txn, key, FORGET, "tombstone", record_id, reason_ref,
                                          confirmation_digest), False

        answer, replayed = await d.commits.run(scope, body)
        d.on_commit()
        value: dict[str, Any] = {**answer, "replayed": replayed, "projection_invalidation": "pending"}
        row = await outbox.find_for(d.store, record_id, INVALIDATE_PROJECTION)
        if row is not None and row.get("coverage_receipt_digest"):
            value["projection_invalidation"] = "complete"
            value["coverage_receipt_digest"] = row["coverage_receipt_digest"]
        return Outcome(value, replayed)

    async def _transition(self, txn: JournalTxn, key: GateKey, tool: str, operation: str, target: str,
                          reason_ref: str, confirmation_digest: str) -> dict[str, Any]:
        """The agent's move through the transition engine, its receipt and its ledger entry;
        returns ``{receipt}``."""
        d, scope, session = self._d, key.scope, txn.session
        auth = authorization_receipt_digest(scope, key.principal, tool, target, confirmation_digest)
        moved = await self._moves.move(
            txn, target, operation,
            {"authorization_receipt_digest": auth, "reason_digest": digest("operation", {"reason_ref": reason_ref}),
             "operation_digest": key.operation_digest},
        )
        event, from_state, to_state = moved.event, moved.from_state, moved.to_state
        receipt = {
            "event_id": event.event_id,
            "operation": operation,
            "from_state": from_state,
            "to_state": to_state,
            "cursor": event.cursor_text,
            "event_digest": event.event_digest,
            "authorization_receipt_digest": auth,
            "transaction_receipt_digest": transaction_receipt_digest(scope, event, key.operation_digest),
        }
        answer = {"receipt": receipt}
        await d.ledger.record(session, key, tool, answer=canonicalize(answer), object_id=target)
        return answer
