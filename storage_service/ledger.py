"""The idempotency ledger of the mutation gate (SPEC §7).

An entry is keyed by the capture-identity digest of ``(scope, principal, idempotency_key)``
and holds the operation digest of the first call and its answer (canonical JSON bytes). It is
read and written inside the mutation's own transaction, so a key is never reserved without
its state change, and a concurrent retry loses the unique-key race and then reads the winner.
Errors are not stored: a failed call changed nothing, and a retry re-executes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from datetime import datetime, timedelta, timezone
from typing import Any

from engram_core.digests import capture_identity_digest
from engram_core.errors import Code, EngramError
from storage_service.store import Scope, Session, Store


@dataclass(frozen=True)
class GateKey:
    scope: Scope
    principal: str
    idempotency_key: str
    operation_digest: str

    @cached_property
    def identity(self) -> str:
        return capture_identity_digest(self.scope.tenant, self.scope.workspace, self.principal, self.idempotency_key)


class Ledger:
    def __init__(self, store: Store, retention_days: float) -> None:
        self._store = store
        self._retention = timedelta(days=retention_days)

    async def lookup(self, session: Session, key: GateKey) -> dict[str, Any] | None:
        """The entry for this key when it was used for the same operation; DIGEST_CONFLICT
        when it was used for another one; None when unused."""
        entry = await self._store.ledger.find_one({"_id": key.identity}, session=session)
        if entry is None:
            return None
        if entry["operation_digest"] != key.operation_digest:
            raise EngramError(Code.DIGEST_CONFLICT)
        return entry

    async def record(self, session: Session, key: GateKey, tool: str, **fields: Any) -> None:
        """Write the entry (first use of the key) with ``fields`` (the answer, or the ids the
        answer is read from). Fails with DuplicateKeyError when a concurrent call won."""
        now = datetime.now(timezone.utc)
        await self._store.ledger.insert_one(
            {
                "_id": key.identity,
                "scope": key.scope.key,
                "tool": tool,
                "operation_digest": key.operation_digest,
                "created_at": now,
                "expires_at": now + self._retention,
                **fields,
            },
            session=session,
        )
