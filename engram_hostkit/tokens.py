"""Mint invocation contexts and confirmations (SPEC §2) the way a host does.

Both tokens are compact JWS (``alg: EdDSA``, ``kid`` = host_id) signed with the host's
Ed25519 key. The keyword-only ``extra_claims`` / ``omit_claims`` / ``header_overrides`` /
``omit_header`` parameters exist so tests can forge malformed tokens through the real code
path; a real host never needs them.
"""

from __future__ import annotations

import functools
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_core.attestation import sign_attestation
from engram_core.digests import operation_digest
from engram_core.jws import private_key_from_b64url, sign_compact
from engram_core.schemas.tools import TOOL_NAMES
from engram_core.timefmt import format_instant

CONTEXT_TYP = "engram-context+jwt"
CONFIRMATION_TYP = "engram-confirmation+jwt"
CONTEXT_META_KEY = "io.engram/context"
CONFIRMATION_META_KEY = "io.engram/confirmation"
CONTEXT_HEADER = "Engram-Context"
DEFAULT_DEADLINE_SECONDS = 60.0



def format_instant_ms(epoch_ms: int) -> str:
    """``YYYY-MM-DDTHH:mm:ss.sssZ`` (UTC, millisecond precision) for epoch milliseconds."""
    return format_instant(int(epoch_ms))


def new_jti() -> str:
    """A fresh random jti (32 base64url characters, 192 bits)."""
    return secrets.token_urlsafe(24)


@functools.lru_cache(maxsize=8)
def _signing_key(private_key_b64url: str) -> Ed25519PrivateKey:
    """The host's Ed25519 key, parsed once: a host mints a context per call, and parsing derives
    the public key (measured: ~2.5 % of the official MCP client's CPU per search)."""
    return private_key_from_b64url(private_key_b64url)


def _finish(
    header: dict[str, Any],
    claims: dict[str, Any],
    private_key_b64url: str,
    extra_claims: Mapping[str, Any] | None,
    omit_claims: Iterable[str],
    header_overrides: Mapping[str, Any] | None,
    omit_header: Iterable[str],
) -> str:
    claims.update(extra_claims or {})
    for name in omit_claims:
        claims.pop(name, None)
    header.update(header_overrides or {})
    for name in omit_header:
        header.pop(name, None)
    return sign_compact(header, claims, _signing_key(private_key_b64url))


def mint_context(
    private_key_b64url: str,
    *,
    host_id: str,
    audience: str,
    tenant: str,
    workspace: str,
    principal: str,
    agent_id: str,
    session: str,
    purpose_ref: str,
    tools: Iterable[str],
    audit_id: str | None = None,
    deadline_ms: int | None = None,
    ttl_seconds: float = 120,
    jti: str | None = None,
    now: float | None = None,
    extra_claims: Mapping[str, Any] | None = None,
    omit_claims: Iterable[str] = (),
    header_overrides: Mapping[str, Any] | None = None,
    omit_header: Iterable[str] = (),
) -> str:
    """Mint the invocation context for one ``tools/list`` or ``tools/call``.

    Put the result in ``params._meta["io.engram/context"]`` (or the ``Engram-Context`` HTTP
    header). Mint a fresh one per call: the gateway refuses a reused ``jti``. ``tools`` is the
    host's opt-in (a subset of :data:`TOOL_NAMES`); ``deadline_ms`` (epoch ms) defaults to
    60 s from ``now``; ``audit_id`` and ``jti`` are random unless given.
    """
    issued = time.time() if now is None else now
    if deadline_ms is None:
        deadline_ms = int((issued + DEFAULT_DEADLINE_SECONDS) * 1000)
    claims: dict[str, Any] = {
        "iss": host_id,
        "aud": audience,
        "iat": issued,
        "exp": issued + ttl_seconds,
        "jti": jti if jti is not None else new_jti(),
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal,
        "agent_id": agent_id,
        "session": session,
        "purpose_ref": purpose_ref,
        "audit_id": audit_id if audit_id is not None else f"aud_{uuid.uuid4().hex}",
        "deadline": format_instant_ms(deadline_ms),
        "tools": list(tools),
    }
    header = {"alg": "EdDSA", "typ": CONTEXT_TYP, "kid": host_id}
    return _finish(header, claims, private_key_b64url, extra_claims, omit_claims, header_overrides, omit_header)


def mint_attestation(key_id: str, private_key_b64url: str, *, tenant: str, workspace: str,
                     payload: Mapping[str, Any], evidence_digest: str) -> str:
    """An attestation (``evidence.attestation``) that attester ``key_id`` vouches for this
    capture's ``payload`` and ``evidence_digest`` in the scope. The operator registers the
    key's public half in the scope's ``attester_keys`` (class ``signed``, or ``earned`` for the
    host's evidence verifier); see docs/admission.md."""
    return sign_attestation(key_id, private_key_from_b64url(private_key_b64url), tenant=tenant,
                            workspace=workspace, payload=payload, evidence_digest=evidence_digest)


def mint_confirmation(
    private_key_b64url: str,
    *,
    host_id: str,
    audience: str,
    tenant: str,
    workspace: str,
    principal: str,
    tool: str,
    target: str,
    arguments: Mapping[str, Any],
    approver: str,
    ttl_seconds: float = 120,
    approved_at: float | None = None,
    now: float | None = None,
    jti: str | None = None,
    extra_claims: Mapping[str, Any] | None = None,
    omit_claims: Iterable[str] = (),
    header_overrides: Mapping[str, Any] | None = None,
    omit_header: Iterable[str] = (),
) -> str:
    """Mint the confirmation that a human (``approver``) approved this exact operation.

    ``arguments`` must be exactly the arguments the call will send (including the
    ``idempotency_key``): the operation digest is computed from them here. ``now`` is when
    approval was requested (``iat``); ``approved_at`` defaults to ``now``. The call must reach
    the gateway within 30 s of ``approved_at``. Put the result in
    ``params._meta["io.engram/confirmation"]``.
    """
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {
        "iss": host_id,
        "aud": audience,
        "iat": issued,
        "approved_at": issued if approved_at is None else approved_at,
        "exp": issued + ttl_seconds,
        "jti": jti if jti is not None else new_jti(),
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal,
        "tool": tool,
        "target": target,
        "operation_digest": operation_digest(tool, dict(arguments)),
        "approver": approver,
    }
    header = {"alg": "EdDSA", "typ": CONFIRMATION_TYP, "kid": host_id}
    return _finish(header, claims, private_key_b64url, extra_claims, omit_claims, header_overrides, omit_header)
