"""The engram host kit: what a host needs to call the gateway (SPEC §2).

Generate a key pair (:func:`generate_host_keys`, ``engram host keygen``), register the public
key with the gateway, then mint an invocation context per call (:func:`mint_context`) and a
confirmation for every human-approved mutation (:func:`mint_confirmation`), and an attestation
for a capture an attester vouches for (:func:`mint_attestation`, docs/admission.md). See
``docs/host-integration.md``.
"""

from engram_core.digests import operation_digest
from engram_hostkit.hostfile import HostFile, HostFileError
from engram_hostkit.keys import generate_host_keys, keygen_main
from engram_hostkit.tokens import (
    CONFIRMATION_META_KEY,
    CONFIRMATION_TYP,
    CONTEXT_HEADER,
    CONTEXT_META_KEY,
    CONTEXT_TYP,
    TOOL_NAMES,
    format_instant_ms,
    mint_attestation,
    mint_confirmation,
    mint_context,
    new_jti,
)

__all__ = [
    "CONFIRMATION_META_KEY",
    "CONFIRMATION_TYP",
    "CONTEXT_HEADER",
    "CONTEXT_META_KEY",
    "CONTEXT_TYP",
    "TOOL_NAMES",
    "HostFile",
    "HostFileError",
    "format_instant_ms",
    "generate_host_keys",
    "keygen_main",
    "mint_attestation",
    "mint_confirmation",
    "mint_context",
    "new_jti",
    "operation_digest",
]
