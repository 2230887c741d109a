"""engram_core.confirmation: the confirmation rules of SPEC §2, on both sides of each limit."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
import redis.asyncio as aioredis

from engram_core.digests import operation_digest
from engram_core.errors import JSONRPC_INTERNAL_ERROR, Code, EngramError, ProtocolRefusal
from engram_core.jws import b64url_decode, b64url_encode
from engram_hostkit.tokens import CONTEXT_TYP
from engram_core.confirmation import ConfirmationVerifier
from engram_core.host_context import InvocationContext, ReplayGuard

from .conftest import AUDIENCE, FORGET_ARGS, FORGET_TARGET, HOST_ID, NOW, Harness, new_host

WITHDRAW_ARGS = {"candidate_id": "cand_" + "b" * 52, "idempotency_key": "withdraw-key-00001", "reason_ref": "reason:oops"}


async def gate_failed(h: Harness, token, ctx: InvocationContext, **call) -> None:
    with pytest.raises(EngramError) as info:
        await h.confirm(token, ctx, **call)
    assert info.value.code is Code.GATE_FAILED


async def ok(h: Harness, token, ctx: InvocationContext, **call):
    return await h.confirm(token, ctx, **call)


@pytest.fixture
async def ctx(harness: Harness) -> InvocationContext:
    """A verified context at NOW with a deadline 60 s out."""
    return await harness.verified()


# --- the happy path ------------------------------------------------------------------------


async def test_valid_confirmation_grants(harness: Harness, ctx):
    grant = await ok(harness, harness.confirmation(ctx, approver="human:carol"), ctx)
    assert grant.approver == "human:carol"
    assert grant.approved_at == NOW
    assert grant.execution_deadline_ms == int(NOW * 1000) + 30_000  # approval window < ctx deadline


async def test_execution_deadline_is_the_earlier_of_the_two(harness: Harness):
    early = await harness.verified(deadline_ms=int(NOW * 1000) + 10_000)
    grant = await ok(harness, harness.confirmation(early), early)
    assert grant.execution_deadline_ms == int(NOW * 1000) + 10_000
    harness.clock.now = NOW + 20
    grant = await ok(harness, harness.confirmation(early, approved_at=NOW + 12.5), early)
    assert grant.execution_deadline_ms == int(NOW * 1000) + 10_000
    late = await harness.verified(deadline_ms=int(NOW * 1000) + 120_000, now=NOW + 20)
    grant = await ok(harness, harness.confirmation(late, approved_at=NOW + 12.5), late)
    assert grant.execution_deadline_ms == int(NOW * 1000) + 42_500


async def test_withdraw_confirmation(harness: Harness, ctx):
    token = harness.confirmation(ctx, tool="engram_memory_withdraw", target=WITHDRAW_ARGS["candidate_id"], arguments=WITHDRAW_ARGS)
    await ok(harness, token, ctx, tool="engram_memory_withdraw", target=WITHDRAW_ARGS["candidate_id"], arguments=WITHDRAW_ARGS)


# --- missing vs invalid ------------------------------------------------------------------------


async def test_missing_confirmation_is_a_protocol_refusal(harness: Harness, ctx):
    with pytest.raises(ProtocolRefusal) as info:
        await harness.confirm(None, ctx)
    assert info.value.jsonrpc_code == JSONRPC_INTERNAL_ERROR


@pytest.mark.parametrize("token", ["", "garbage", "a.b.c", 17])
async def test_malformed_confirmation_gate_failed(harness: Harness, ctx, token):
    await gate_failed(harness, token, ctx)


async def test_context_token_is_not_a_confirmation(harness: Harness, ctx):
    await gate_failed(harness, harness.context(), ctx)


@pytest.mark.parametrize("typ", ["JWT", CONTEXT_TYP])
async def test_typ_mismatch_gate_failed(harness: Harness, ctx, typ):
    await gate_failed(harness, harness.confirmation(ctx, header_overrides={"typ": typ}), ctx)


async def test_alg_none_and_hs256_gate_failed(harness: Harness, ctx):
    h, c, _ = harness.confirmation(ctx).split(".")
    header = json.loads(b64url_decode(h))
    none_header = b64url_encode(json.dumps({**header, "alg": "none"}).encode())
    await gate_failed(harness, f"{none_header}.{c}.", ctx)
    hs_header = b64url_encode(json.dumps({**header, "alg": "HS256"}).encode())
    mac = hmac.new(b64url_decode(harness.host.public_key), f"{hs_header}.{c}".encode(), hashlib.sha256).digest()
    await gate_failed(harness, f"{hs_header}.{c}.{b64url_encode(mac)}", ctx)


async def test_bad_signature_gate_failed(harness: Harness, ctx):
    intruder = new_host(HOST_ID, [])
    await gate_failed(harness, harness.confirmation(ctx, host=intruder), ctx)


async def test_unknown_kid_gate_failed(harness: Harness, ctx):
    await gate_failed(harness, harness.confirmation(ctx, host=new_host("host-unknown", [])), ctx)


async def test_signed_by_another_registered_host_gate_failed(harness: Harness, ctx):
    await gate_failed(harness, harness.confirmation(ctx, host=harness.other), ctx)


async def test_iss_must_equal_kid_and_context_host(harness: Harness, ctx):
    await gate_failed(harness, harness.confirmation(ctx, extra_claims={"iss": "host-b"}), ctx)


async def test_audience_mismatch_gate_failed(harness: Harness, ctx):
    await gate_failed(harness, harness.confirmation(ctx, audience="other-gateway"), ctx)
    await gate_failed(harness, harness.confirmation(ctx, audience=[AUDIENCE]), ctx)


# --- binding to the call ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "override",
    [
        {"tenant": "beta"},
        {"workspace": "ws-2"},
        {"principal": "user:mallory"},
        {"tool": "engram_memory_withdraw"},
        {"target": "mem_" + "c" * 52},
        {"arguments": {**FORGET_ARGS, "idempotency_key": "forget-key-0000002"}},
        {"arguments": {**FORGET_ARGS, "reason_ref": "reason:other"}},
        {"arguments": {k: v for k, v in FORGET_ARGS.items() if k != "reason_ref"}},
    ],
    ids=["tenant", "workspace", "principal", "tool", "target", "digest-key", "digest-reason", "digest-missing-field"],
)
async def test_each_binding_mismatch_gate_failed(harness: Harness, ctx, override):
    await gate_failed(harness, harness.confirmation(ctx, **override), ctx)


async def test_call_side_mismatch_gate_failed(harness: Harness, ctx):
    token = harness.confirmation(ctx)
    await gate_failed(harness, token, ctx, target="mem_" + "d" * 52)
    await gate_failed(harness, token, ctx, tool="engram_memory_withdraw")
    await gate_failed(harness, token, ctx, arguments={**FORGET_ARGS, "reason_ref": "reason:changed"})
    other_ctx = await harness.verified(principal="user:mallory")
    await gate_failed(harness, token, other_ctx)
    await ok(harness, token, ctx)  # none of the failures spent it


async def test_operation_digest_must_be_a_matching_string(harness: Harness, ctx):
    right = operation_digest("engram_memory_forget", FORGET_ARGS)
    await gate_failed(harness, harness.confirmation(ctx, extra_claims={"operation_digest": right.upper()}), ctx)
    await gate_failed(harness, harness.confirmation(ctx, extra_claims={"operation_digest": 5}), ctx)
    await ok(harness, harness.confirmation(ctx, extra_claims={"operation_digest": right}), ctx)


CLAIMS = ["iss", "aud", "jti", "tenant", "workspace", "principal", "tool", "target",
          "operation_digest", "approver", "iat", "approved_at", "exp"]


@pytest.mark.parametrize("claim", CLAIMS)
async def test_each_claim_required(harness: Harness, ctx, claim):
    await gate_failed(harness, harness.confirmation(ctx, omit_claims=[claim]), ctx)


async def test_unknown_claim_gate_failed(harness: Harness, ctx):
    await gate_failed(harness, harness.confirmation(ctx, extra_claims={"confirmed": True}), ctx)


@pytest.mark.parametrize("approver", ["", None, 3, "é" * 256 + "x", "e\u0301"])
async def test_bad_approver_gate_failed(harness: Harness, ctx, approver):
    await gate_failed(harness, harness.confirmation(ctx, extra_claims={"approver": approver}), ctx)


async def test_approver_512_bytes_ok(harness: Harness, ctx):
    await ok(harness, harness.confirmation(ctx, approver="é" * 256), ctx)


@pytest.mark.parametrize("claim", ["iat", "approved_at", "exp"])
@pytest.mark.parametrize("value", ["1767225600", True, None])
async def test_times_must_be_numbers(harness: Harness, ctx, claim, value):
    await gate_failed(harness, harness.confirmation(ctx, extra_claims={claim: value}), ctx)


@pytest.mark.parametrize("length,good", [(15, False), (16, True), (128, True), (129, False)])
async def test_jti_bounds(harness: Harness, ctx, length, good):
    jti = (f"cnf-{length}-{id(ctx)}-" + "z" * length)[:length]
    token = harness.confirmation(ctx, jti=jti)
    if good:
        await ok(harness, token, ctx)
    else:
        await gate_failed(harness, token, ctx)


# --- times --------------------------------------------------------------------------------


async def test_lifetime_300_ok_301_refused(harness: Harness, ctx):
    await ok(harness, harness.confirmation(ctx, ttl_seconds=300), ctx)
    await gate_failed(harness, harness.confirmation(ctx, ttl_seconds=301), ctx)
    await gate_failed(harness, harness.confirmation(ctx, ttl_seconds=300.001), ctx)


async def test_approved_at_equal_iat_ok_before_iat_refused(harness: Harness, ctx):
    await ok(harness, harness.confirmation(ctx, now=NOW - 10, approved_at=NOW - 10), ctx)
    await gate_failed(harness, harness.confirmation(ctx, now=NOW - 10, approved_at=NOW - 10.001), ctx)


async def test_approved_at_equal_exp_refused(harness: Harness, ctx):
    # iat = NOW - 99, exp = NOW + 1: approved_at just below exp is fine, at exp is not
    await ok(harness, harness.confirmation(ctx, now=NOW - 99, ttl_seconds=100, approved_at=NOW + 0.999), ctx)
    await gate_failed(harness, harness.confirmation(ctx, now=NOW - 99, ttl_seconds=100, approved_at=NOW + 1), ctx)


async def test_now_before_iat_skew(harness: Harness, ctx):
    harness.clock.now = NOW - 5
    await ok(harness, harness.confirmation(ctx), ctx)
    harness.clock.now = NOW - 5.001
    await gate_failed(harness, harness.confirmation(ctx), ctx)


async def test_now_just_below_exp_ok_at_exp_refused(harness: Harness, ctx):
    harness.clock.now = NOW + 20
    await ok(harness, harness.confirmation(ctx, ttl_seconds=20.001, approved_at=NOW + 10), ctx)
    await gate_failed(harness, harness.confirmation(ctx, ttl_seconds=20, approved_at=NOW + 10), ctx)


async def test_execution_window_30s(harness: Harness, ctx):
    harness.clock.now = NOW + 30
    await ok(harness, harness.confirmation(ctx), ctx)
    harness.clock.now = NOW + 30.001
    await gate_failed(harness, harness.confirmation(ctx), ctx)


async def test_approved_at_in_the_future_beyond_skew_refused(harness: Harness, ctx):
    await ok(harness, harness.confirmation(ctx, approved_at=NOW + 5), ctx)
    await gate_failed(harness, harness.confirmation(ctx, approved_at=NOW + 5.001), ctx)


# --- single use -------------------------------------------------------------------------------


async def test_reused_confirmation_gate_failed(harness: Harness, ctx):
    token = harness.confirmation(ctx)
    await ok(harness, token, ctx)
    await gate_failed(harness, token, ctx)
    second_ctx = await harness.verified()
    await gate_failed(harness, token, second_ctx)


async def test_invalid_confirmation_does_not_burn_its_jti(harness: Harness, ctx):
    jti = "cnf-victim-000000001"
    await gate_failed(harness, harness.confirmation(ctx, jti=jti, target="mem_" + "e" * 52), ctx)
    await gate_failed(harness, harness.confirmation(ctx, jti=jti, host=new_host(HOST_ID, [])), ctx)
    await ok(harness, harness.confirmation(ctx, jti=jti), ctx)


async def test_context_and_confirmation_jtis_do_not_collide(harness: Harness):
    ctx = await harness.verified(jti="shared-between-kinds-1")
    await ok(harness, harness.confirmation(ctx, jti="shared-between-kinds-1"), ctx)


async def test_replay_key_namespace_and_ttl(harness: Harness, ctx, redis_client: aioredis.Redis, replay_prefix: str):
    jti = "cnf-digest-check-001"
    harness.clock.now = NOW + 10
    await ok(harness, harness.confirmation(ctx, jti=jti, ttl_seconds=120), ctx)
    key = replay_prefix + "cnf:" + hashlib.sha256(f"{HOST_ID}\0{jti}".encode()).hexdigest()
    ttl = await redis_client.ttl(key)
    assert 110 < ttl <= 115  # 110 s left + 5 s skew


async def test_redis_unreachable_is_store_unavailable(harness: Harness, ctx):
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    verifier = ConfirmationVerifier(harness.registry, AUDIENCE, ReplayGuard(dead, timeout_seconds=0.3), clock=harness.clock)
    try:
        with pytest.raises(EngramError) as info:
            await verifier.verify(harness.confirmation(ctx), ctx=ctx, tool="engram_memory_forget", target=FORGET_TARGET, arguments=FORGET_ARGS)
        assert info.value.code is Code.STORE_UNAVAILABLE and info.value.retriable
    finally:
        await dead.aclose()
