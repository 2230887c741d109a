"""Verify a host confirmation (SPEC §2 "Confirmation"): a human approved this exact operation.

withdraw and forget always need one (capture and request_admission when the scope says so).
It arrives in ``params._meta["io.engram/confirmation"]``. No confirmation at all is the
protocol refusal -32603; one that is present but not valid for this call is the envelope error
``gate_failed``. As with the context, every check runs before the jti is claimed.

The gateway verifies it (jti spent in Redis) and forwards it in the ``Caller``; storage
verifies it again against the request it is asked to execute (jti spent once more, in MongoDB,
so a replay to storage fails even though the gateway's guard never saw it).
"""

from __future__ import annotations

import hmac
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from engram_core.digests import operation_digest
from engram_core.errors import Code, EngramError, ProtocolRefusal
from engram_core.jws import JWSError, verify_compact
from engram_core.host_context import (
    CLOCK_SKEW_SECONDS,
    MAX_LIFETIME_SECONDS,
    ClaimError,
    InvocationContext,
    JtiGuard,
    ReplayGuardUnavailable,
    check_jti,
    check_number,
    check_text,
    replay_ttl,
)
from engram_core.hosts import HostRegistry

log = logging.getLogger("engram.confirmation")

CONFIRMATION_TYP = "engram-confirmation+jwt"
EXECUTION_WINDOW_SECONDS = 30.0
CONFIRMATION_CLAIMS = frozenset(
    {
        "iss",
        "aud",
        "jti",
        "tenant",
        "workspace",
        "principal",
        "tool",
        "target",
        "operation_digest",
        "approver",
        "iat",
        "approved_at",
        "exp",
    }
)


@dataclass(frozen=True)
class ConfirmationGrant:
    """A verified, now spent, confirmation. ``execution_deadline_ms`` (epoch ms) is
    ``min(context deadline, approved_at + 30 s)``: the operation must finish by then."""

    approver: str
    approved_at: float
    execution_deadline_ms: int


class ConfirmationVerifier:
    """Checks a confirmation against the verified context and the call it is meant for.

    ``gate_failed`` for: a malformed or forged token, an unknown key, ``typ`` other than
    ``engram-confirmation+jwt``, ``kid``/``iss`` other than the context's host, a wrong
    audience, tenant/workspace/principal other than the context's, another tool, target or
    operation digest, a missing/unknown/ill-typed claim, ``exp - iat`` over 300 s, not
    ``iat ≤ approved_at < exp``, ``now`` outside ``[iat - 5 s, exp)``, ``now`` more than 30 s
    after ``approved_at``, and a reused jti.

    Decisions where SPEC §2 is silent: the claim set is closed; ``approved_at`` more than the
    5 s skew in the future is refused (otherwise the execution window could be stretched past
    30 s from now); the approver follows the opaque-ref rule (non-empty NFC, ≤ 512 bytes).
    If Redis cannot be asked, the call fails ``STORE_UNAVAILABLE`` (retriable) rather than
    ``gate_failed``: the confirmation was not spent and may be retried within its window.

    ``grace_seconds`` stretches ``exp`` and the execution window by that much (storage's second
    check of a call the gateway verified, in flight since).
    """

    def __init__(
        self,
        registry: HostRegistry,
        audience: str,
        replay: JtiGuard,
        clock: Callable[[], float] = time.time,
        grace_seconds: float = 0.0,
    ) -> None:
        self._registry = registry
        self._audience = audience
        self._replay = replay
        self._clock = clock
        self._grace = grace_seconds

    async def verify(
        self,
        token: str | None,
        *,
        ctx: InvocationContext,
        tool: str,
        target: str,
        arguments: dict[str, Any] | None = None,
        expected_digest: str | None = None,
    ) -> ConfirmationGrant:
        """Verify and spend the confirmation for ``tool`` on ``target`` with ``arguments`` (or,
        where only the operation digest of the arguments is known, ``expected_digest``)."""
        if token is None:
            log.info("confirmation refused: missing")
            raise ProtocolRefusal.untrusted()
        try:
            header, claims = verify_compact(token, self._registry.public_key, CONFIRMATION_TYP)
        except JWSError as exc:
            self._fail(exc.reason)
        try:
            grant, jti, exp = self._check(header, claims, ctx, tool, target, arguments, expected_digest)
        except ClaimError as exc:
            self._fail(exc.reason)
        try:
            fresh = await self._replay.claim("cnf", jti, replay_ttl(exp, self._clock()), host_id=ctx.host_id)
        except ReplayGuardUnavailable:
            log.error("confirmation not checked: replay store unavailable")
            raise EngramError(Code.STORE_UNAVAILABLE) from None
        if not fresh:
            self._fail("replayed")
        return grant

    def _check(
        self,
        header: dict[str, Any],
        claims: dict[str, Any],
        ctx: InvocationContext,
        tool: str,
        target: str,
        arguments: dict[str, Any] | None,
        expected_digest: str | None,
    ) -> tuple[ConfirmationGrant, str, float]:
        if set(claims) != CONFIRMATION_CLAIMS:
            raise ClaimError("claim_set")
        if header["kid"] != ctx.host_id or claims["iss"] != ctx.host_id:
            raise ClaimError("iss_mismatch")
        if not isinstance(claims["aud"], str) or claims["aud"] != self._audience:
            raise ClaimError("aud_mismatch")
        for name in ("tenant", "workspace", "principal"):
            if not isinstance(claims[name], str) or claims[name] != getattr(ctx, name):
                raise ClaimError(f"{name}_mismatch")
        if not isinstance(claims["tool"], str) or claims["tool"] != tool:
            raise ClaimError("tool_mismatch")
        if not isinstance(claims["target"], str) or claims["target"] != target:
            raise ClaimError("target_mismatch")
        approver = check_text(claims["approver"], "bad_approver")
        jti = check_jti(claims["jti"])
        iat = check_number(claims["iat"], "bad_iat")
        approved_at = check_number(claims["approved_at"], "bad_approved_at")
        exp = check_number(claims["exp"], "bad_exp")
        if exp - iat > MAX_LIFETIME_SECONDS:
            raise ClaimError("lifetime")
        if not iat <= approved_at < exp:
            raise ClaimError("approval_outside_lifetime")
        now = self._clock()
        if now < iat - CLOCK_SKEW_SECONDS or now < approved_at - CLOCK_SKEW_SECONDS:
            raise ClaimError("not_yet_valid")
        if now >= exp + self._grace:
            raise ClaimError("expired")
        if now > approved_at + EXECUTION_WINDOW_SECONDS + self._grace:
            raise ClaimError("execution_window_passed")
        claimed_digest = claims["operation_digest"]
        if expected_digest is None:
            try:
                expected_digest = operation_digest(tool, arguments or {})
            except (TypeError, ValueError):
                raise ClaimError("arguments_not_canonical") from None
        if not isinstance(claimed_digest, str) or not hmac.compare_digest(
            claimed_digest.encode("utf-8", "surrogatepass"), expected_digest.encode("utf-8")
        ):
            raise ClaimError("digest_mismatch")
        window_end_ms = math.floor((approved_at + EXECUTION_WINDOW_SECONDS) * 1000)
        grant = ConfirmationGrant(
            approver=approver,
            approved_at=approved_at,
            execution_deadline_ms=min(ctx.deadline_ms, window_end_ms),
        )
        return grant, jti, exp

    @staticmethod
    def _fail(reason: str) -> NoReturn:
        log.info("confirmation refused: %s", reason)
        raise EngramError(Code.GATE_FAILED)
