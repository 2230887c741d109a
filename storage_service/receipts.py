"""Receipts storage issues for mutations (SPEC §8): each is a digest over an object that
names what was committed; hosts can recompute them from the documented fields."""

from __future__ import annotations

from engram_core.digests import digest
from storage_service.journal import Event
from storage_service.store import Scope


def transaction_receipt_digest(scope: Scope, event: Event, operation_digest: str) -> str:
    """Binds the committed event to the scope and the operation (tool + arguments) it ran."""
    return digest(
        "transaction",
        {
            "scope_digest": scope.key,
            "cursor": event.cursor_text,
            "event_id": event.event_id,
            "event_digest": event.event_digest,
            "operation_digest": operation_digest,
            "committed_at": event.at,
        },
    )


def authorization_receipt_digest(scope: Scope, principal: str, tool: str, target: str, confirmation_digest: str) -> str:
    """Binds who was authorised to do what on which target, and the human confirmation behind
    it (the gateway's digest of approver and approval time; never the token)."""
    return digest(
        "authorization",
        {
            "scope_digest": scope.key,
            "principal_digest": digest("authorization", {"principal": principal}),
            "tool": tool,
            "target": target,
            "confirmation_digest": confirmation_digest,
        },
    )
