"""Attestations: what makes a candidate's trust class ``signed`` or ``earned`` (SPEC §10).

An attestation is a compact JWS (``alg: EdDSA``, ``typ: engram-attestation+jwt``, ``kid`` = an
attester key id registered for the scope by the operator) in ``evidence.attestation``. Its
claims bind it to one scope and one piece of content, so it cannot be replayed onto another:

    {"tenant": …, "workspace": …,
     "payload_digest": digest("payload", the capture payload without ``retention``),
     "evidence_digest": the capture's evidence.evidence_digest}

``retention`` is left out because it is the scope's storage decision (storage fills in the
default), not the content an attester vouches for; host and worker compute the same digest.

The trust class comes from the key that verified it: an operator registers each key as
``signed`` (an attester vouches for the capture) or ``earned`` (the host's evidence verifier
checked the evidence against its sources: SPEC §10's "earned"; the seed leaves how a host proves
that open, so we read it as a signature by the verifier's registered key). A token that does
not verify raises :class:`AttestationInvalid` with a constant reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from engram_core.digests import digest
from engram_core.jws import (
    MAX_TOKEN_BYTES,
    JWSError,
    b64url_decode,
    parse_json_object,
    public_key_from_b64url,
    sign_compact,
    verify_compact,
)

ATTESTATION_TYP = "engram-attestation+jwt"
_BOUND = ("tenant", "workspace", "payload_digest", "evidence_digest")


class AttestationInvalid(Exception):
    """The attestation does not verify for this scope and content. ``reason`` is constant."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__("invalid attestation")


class _Key(Protocol):
    key_id: str
    public_key: str
    trust: str


def attested_digest(payload: Mapping[str, Any]) -> str:
    """The payload digest an attestation binds: the payload without ``retention``."""
    return digest("payload", {k: v for k, v in payload.items() if k != "retention"})


def attestation_claims(tenant: str, workspace: str, payload: Mapping[str, Any], evidence_digest: str) -> dict[str, str]:
    return {"tenant": tenant, "workspace": workspace, "payload_digest": attested_digest(payload),
            "evidence_digest": evidence_digest}


def sign_attestation(key_id: str, private_key: Ed25519PrivateKey, *, tenant: str, workspace: str,
                     payload: Mapping[str, Any], evidence_digest: str) -> str:
    """An attestation by ``key_id`` of ``payload`` and ``evidence_digest`` in the scope."""
    return sign_compact({"typ": ATTESTATION_TYP, "kid": key_id},
                        attestation_claims(tenant, workspace, payload, evidence_digest), private_key)


def _check_shape(header: Mapping[str, Any], claims: Mapping[str, Any], expected: Mapping[str, str]) -> None:
    # Exactly the bound claims and a minimal header: a verified attestation carries nothing
    # but digests, the scope and a signature, so screening need not read it (decide.py).
    if set(header) - {"alg", "typ", "kid"}:
        raise AttestationInvalid("extra_header")
    if set(claims) != set(_BOUND):
        raise AttestationInvalid("claims_not_exact")
    for name in _BOUND:
        if claims[name] != expected[name]:
            raise AttestationInvalid(f"{name}_mismatch")


def verify_attestation(token: str, keys: Sequence[_Key], *, tenant: str, workspace: str,
                       payload: Mapping[str, Any], evidence_digest: str) -> str:
    """The trust class ``token`` earns (``signed`` or ``earned``); raises AttestationInvalid."""
    by_id = {k.key_id: k for k in keys}

    def resolve(kid: str) -> Ed25519PublicKey | None:
        key = by_id.get(kid)
        return public_key_from_b64url(key.public_key) if key is not None else None

    try:
        header, claims = verify_compact(token, resolve, ATTESTATION_TYP)
    except JWSError as exc:
        raise AttestationInvalid(exc.reason) from None
    _check_shape(header, claims, attestation_claims(tenant, workspace, payload, evidence_digest))
    return by_id[header["kid"]].trust


def is_bound_attestation(token: Any, *, tenant: str, workspace: str, payload: Mapping[str, Any],
                         evidence_digest: str) -> bool:
    """Whether ``token`` has an attestation's exact shape for this scope and content, signature
    aside (its key may have been removed since the capture verified it): then it holds nothing
    but what it binds."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES or token.count(".") != 2:
        return False
    head, body, _ = token.split(".")
    try:
        header, claims = parse_json_object(b64url_decode(head)), parse_json_object(b64url_decode(body))
        if header.get("alg") != "EdDSA" or header.get("typ") != ATTESTATION_TYP or not isinstance(header.get("kid"), str):
            return False
        _check_shape(header, claims, attestation_claims(tenant, workspace, payload, evidence_digest))
    except (ValueError, AttestationInvalid):
        return False
    return True
