"""What the storage operations share: the store, the vault, the ledger, the policies, the key
provider and the relay's wake-up. Built once in :mod:`storage_service.server`."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engram_core.crypto import KeyProvider
from engram_core.scope_changes import ChangePublisher
from engram_core.timefmt import now_ms
from storage_service.authority import HostAuthority
from storage_service.commits import GroupCommitter
from storage_service.ledger import Ledger
from storage_service.policy import Policies
from storage_service.store import Scope, Session, Store
from storage_service.vault import Vault


@dataclass
class Deps:
    store: Store
    keys: KeyProvider
    # Verifies the host's own tokens forwarded with each agent-facing call.
    authority: HostAuthority
    ledger_retention_days: float = 7.0
    on_commit: Callable[[], None] = field(default=lambda: None)
    # The admission service publishes a decision task itself; the relay publishes it again
    # only if no decision is recorded this many seconds later (worker or broker lost it).
    decision_backstop_seconds: float = 10.0
    # Storage's clock in epoch ms: what "now" is for expiry (the sweep and every read).
    clock: Callable[[], int] = field(default=now_ms)
    # Publishes each scope's change token after every committed write group (readers reuse
    # their copy of a scope's policy and head until it changes: engram_core.scope_changes).
    changes: ChangePublisher | None = None

    def __post_init__(self) -> None:
        self.vault = Vault(self.store, self.keys)
        self.ledger = Ledger(self.store, self.ledger_retention_days)
        self.commits = GroupCommitter(self.store, publish=self.changes.publish if self.changes else None)
        self.policies = Policies(self.store, self.commits)

    def forgotten_id(self, scope: Scope, payload_digest: str) -> str:
        """The keyed HMAC under which a tombstoned payload digest is remembered (SPEC §10.4)."""
        key = self.keys.hmac_key(scope.tenant, "forgotten-content")
        mac = hmac.new(key, scope.key.encode("ascii") + b"\x00" + payload_digest.encode("ascii"), hashlib.sha256)
        return f"{scope.key}:{mac.hexdigest()}"

    async def matches_forgotten(self, scope: Scope, payload_digest: str, session: Session | None = None) -> bool:
        doc: Any = await self.store.forgotten.find_one({"_id": self.forgotten_id(scope, payload_digest)}, session=session)
        return doc is not None
