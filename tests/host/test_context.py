"""engram_core.host_context: every invocation-context rule of SPEC §2, on both sides of each limit."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from engram_core.errors import JSONRPC_INTERNAL_ERROR, ProtocolRefusal
from engram_core.jws import b64url_decode, b64url_encode, private_key_from_b64url
from engram_core.schemas.tools import TOOL_NAMES
from engram_hostkit.tokens import CONFIRMATION_TYP
from engram_cli.datastores import ChildProcess, start_redis
from engram_core.host_context import ContextUnverifiable, ContextVerifier, ReplayGuard, parse_instant_ms
from engram_core.hosts import upsert_host

from .conftest import AUDIENCE, HOST_ID, NOW, TENANT, Harness, new_host


async def refused(h: Harness, meta, header=None) -> None:
    with pytest.raises(ProtocolRefusal) as info:
        await h.contexts.verify(meta, header)
    assert info.value.jsonrpc_code == JSONRPC_INTERNAL_ERROR


async def accepted(h: Harness, meta, header=None):
    return await h.contexts.verify(meta, header)


# --- the happy path and the sources --------------------------------------------------------


async def test_valid_context_binds_every_field(harness: Harness):
    token = harness.context(jti="j" * 20, audit_id="audit-1", tools=["engram_memory_search"])
    ctx = await accepted(harness, token)
    assert (ctx.host_id, ctx.tenant, ctx.workspace, ctx.principal) == (HOST_ID, TENANT, "ws-1", "user:alice")
    assert (ctx.agent_id, ctx.session, ctx.purpose_ref, ctx.audit_id) == ("agent-1", "session-1", "purpose:test", "audit-1")
    assert ctx.tools == frozenset({"engram_memory_search"})
    assert ctx.deadline_ms == int(NOW * 1000) + 60_000
    assert (ctx.jti, ctx.iat, ctx.exp) == ("j" * 20, NOW, NOW + 120)


async def test_missing_token_refused(harness: Harness):
    await refused(harness, None, None)


async def test_header_only_is_accepted(harness: Harness):
    await accepted(harness, None, harness.context())


async def test_identical_meta_and_header_is_fine(harness: Harness):
    token = harness.context()
    await accepted(harness, token, token)


async def test_source_conflict_refused_even_when_both_are_valid(harness: Harness):
    await refused(harness, harness.context(), harness.context())


async def test_source_conflict_does_not_burn_either_jti(harness: Harness):
    a, b = harness.context(), harness.context()
    await refused(harness, a, b)
    await accepted(harness, a)
    await accepted(harness, None, b)


# --- malformed, unsigned, forged -------------------------------------------------------------


@pytest.mark.parametrize("token", ["", "garbage", "a.b", "a.b.c", "a.b.c.d", 42, ["a", "b"]])
async def test_malformed_refused(harness: Harness, token):
    await refused(harness, token)


def _sections(token: str) -> tuple[dict, dict]:
    h, c, _ = token.split(".")
    return json.loads(b64url_decode(h)), json.loads(b64url_decode(c))


async def test_alg_none_refused(harness: Harness):
    header, claims = _sections(harness.context())
    header["alg"] = "none"
    forged = b64url_encode(json.dumps(header).encode()) + "." + b64url_encode(json.dumps(claims).encode()) + "."
    await refused(harness, forged)


async def test_hs256_keyed_with_the_public_key_refused(harness: Harness):
    header, claims = _sections(harness.context())
    header["alg"] = "HS256"
    signing_input = b64url_encode(json.dumps(header).encode()) + "." + b64url_encode(json.dumps(claims).encode())
    secret = b64url_decode(harness.host.public_key)
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    await refused(harness, signing_input + "." + b64url_encode(mac))


async def test_alg_override_refused_even_when_ed25519_signed(harness: Harness):
    await refused(harness, harness.context(header_overrides={"alg": "HS256"}))


async def test_tampered_claims_refused(harness: Harness):
    token = harness.context()
    h, _, s = token.split(".")
    _, claims = _sections(token)
    claims["tenant"] = "beta"
    await refused(harness, h + "." + b64url_encode(json.dumps(claims).encode()) + "." + s)


async def test_signed_by_an_unregistered_key_refused(harness: Harness):
    intruder = new_host(HOST_ID, [TENANT])  # claims to be host-a, own key
    await refused(harness, harness.context(host=intruder))


async def test_unknown_kid_refused(harness: Harness):
    stranger = new_host("host-unknown", [TENANT])
    await refused(harness, harness.context(host=stranger))


async def test_kid_missing_refused(harness: Harness):
    await refused(harness, harness.context(omit_header=["kid"]))


async def test_other_registered_host_cannot_sign_as_this_one(harness: Harness):
    # host-b's key, kid host-a: the signature is checked against host-a's key
    forged = harness.context(host=harness.other, header_overrides={"kid": HOST_ID}, extra_claims={"iss": HOST_ID})
    await refused(harness, forged)


async def test_iss_must_equal_kid(harness: Harness):
    await refused(harness, harness.context(extra_claims={"iss": "host-b"}))


@pytest.mark.parametrize("typ", ["JWT", CONFIRMATION_TYP, "engram-context+JWT", None])
async def test_typ_mismatch_refused(harness: Harness, typ):
    if typ is None:
        await refused(harness, harness.context(omit_header=["typ"]))
    else:
        await refused(harness, harness.context(header_overrides={"typ": typ}))


async def test_crit_header_refused(harness: Harness):
    await refused(harness, harness.context(header_overrides={"crit": ["exp"]}))


@pytest.mark.parametrize("aud", ["other-gateway", [AUDIENCE], "", None])
async def test_audience_mismatch_refused(harness: Harness, aud):
    await refused(harness, harness.context(audience=aud))


# --- claims present and well-typed -----------------------------------------------------------

ALL_CLAIMS = [
    "iss", "aud", "iat", "exp", "jti", "tenant", "workspace", "principal",
    "agent_id", "session", "purpose_ref", "audit_id", "deadline", "tools",
]


@pytest.mark.parametrize("claim", ALL_CLAIMS)
async def test_each_claim_is_required(harness: Harness, claim):
    await refused(harness, harness.context(omit_claims=[claim]))


async def test_unknown_claim_refused(harness: Harness):
    await refused(harness, harness.context(extra_claims={"nbf": NOW}))


TEXT_CLAIMS = ["tenant", "workspace", "principal", "agent_id", "session", "purpose_ref", "audit_id"]


@pytest.mark.parametrize("claim", TEXT_CLAIMS)
@pytest.mark.parametrize("value", ["", 7, None, ["x"], {"a": 1}, True])
async def test_text_claims_must_be_non_empty_strings(harness: Harness, claim, value):
    await refused(harness, harness.context(extra_claims={claim: value}))


@pytest.mark.parametrize("claim", TEXT_CLAIMS)
async def test_text_claims_byte_bound(harness: Harness, claim):
    at_limit = "é" * 256  # 512 UTF-8 bytes, 256 characters
    over = at_limit + "x"
    if claim == "tenant":  # the registry itself refuses a 513-byte tenant
        upsert_host(str(harness.registry_path), HOST_ID, harness.host.public_key, [at_limit])
        harness.mono.advance(1.0)
    await accepted(harness, harness.context(extra_claims={claim: at_limit}))
    await refused(harness, harness.context(extra_claims={claim: over}))


@pytest.mark.parametrize("claim", TEXT_CLAIMS)
async def test_text_claims_must_be_nfc(harness: Harness, claim):
    decomposed = "e\u0301"  # e + combining acute: not NFC
    if claim == "tenant":
        upsert_host(str(harness.registry_path), HOST_ID, harness.host.public_key, [decomposed])
        harness.mono.advance(1.0)
    await refused(harness, harness.context(extra_claims={claim: decomposed}))


async def test_lone_surrogate_refused(harness: Harness):
    header, claims = _sections(harness.context())
    claims["principal"] = "\ud800"
    signing_input = b64url_encode(json.dumps(header).encode()) + "." + b64url_encode(json.dumps(claims).encode())
    signature = private_key_from_b64url(harness.host.private_key).sign(signing_input.encode())
    await refused(harness, signing_input + "." + b64url_encode(signature))


@pytest.mark.parametrize("claim", ["iat", "exp"])
@pytest.mark.parametrize("value", ["1767225600", None, True, [1]])
async def test_times_must_be_numbers(harness: Harness, claim, value):
    await refused(harness, harness.context(extra_claims={claim: value}))


async def test_integer_times_accepted(harness: Harness):
    await accepted(harness, harness.context(extra_claims={"iat": int(NOW), "exp": int(NOW) + 60}))


# --- lifetime and clock ----------------------------------------------------------------------


async def test_lifetime_300_ok_301_refused(harness: Harness):
    await accepted(harness, harness.context(ttl_seconds=300))
    await refused(harness, harness.context(ttl_seconds=301))
    await refused(harness, harness.context(ttl_seconds=300.001))


async def test_exp_not_after_iat_refused(harness: Harness):
    harness.clock.now = NOW - 1
    await refused(harness, harness.context(ttl_seconds=0))
    await refused(harness, harness.context(ttl_seconds=-1))


async def test_skew_before_iat_5s_ok_5001ms_refused(harness: Harness):
    harness.clock.now = NOW - 5
    await accepted(harness, harness.context())
    harness.clock.now = NOW - 5.001
    await refused(harness, harness.context())


async def test_just_below_exp_ok_at_exp_refused(harness: Harness):
    harness.clock.now = NOW + 120 - 0.001
    await accepted(harness, harness.context(ttl_seconds=120))
    harness.clock.now = NOW + 120
    await refused(harness, harness.context(ttl_seconds=120))
    harness.clock.now = NOW + 121
    await refused(harness, harness.context(ttl_seconds=120))


# --- jti ------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [16, 17, 127, 128])
async def test_jti_lengths_accepted(harness: Harness, length):
    await accepted(harness, harness.context(jti=harness_jti(length)))


@pytest.mark.parametrize("length", [0, 15, 129])
async def test_jti_lengths_refused(harness: Harness, length):
    await refused(harness, harness.context(jti=harness_jti(length)))


@pytest.mark.parametrize("jti", ["a" * 15 + " ", "a" * 15 + "\u00e9", "a" * 15 + "\t", "a" * 15 + "\x7f", 1234567890123456789])
async def test_jti_must_be_visible_ascii_string(harness: Harness, jti):
    await refused(harness, harness.context(extra_claims={"jti": jti}))


async def test_jti_with_every_visible_ascii_character(harness: Harness):
    visible = "".join(chr(c) for c in range(0x21, 0x7F))  # 94 characters
    await accepted(harness, harness.context(jti=visible))


_counter = iter(range(10**9))


def harness_jti(length: int) -> str:
    stem = f"{next(_counter):08d}-{NOW}-"
    return (stem + "x" * length)[:length]


# --- deadline -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "deadline",
    [
        "2026-01-01T00:01:00Z",
        "2026-01-01T00:01:00.00Z",
        "2026-01-01T00:01:00.0000Z",
        "2026-01-01T00:01:00.000+00:00",
        "2026-01-01 00:01:00.000Z",
        "2026-02-30T00:00:00.000Z",
        "2026-01-01T24:00:00.000Z",
        "2026-01-01T00:01:00.000z",
        " 2026-01-01T00:01:00.000Z",
        "2026-01-01T00:01:00.000Z\n",
        "\u0662\u0660\u0662\u0666-01-01T00:01:00.000Z",  # Arabic-Indic digits
        "2026-01-01T00:01:00.\uff10\uff10\uff10Z",  # fullwidth digits
        1767225660000,
        None,
    ],
)
async def test_deadline_must_be_a_strict_instant(harness: Harness, deadline):
    await refused(harness, harness.context(extra_claims={"deadline": deadline}))


async def test_deadline_in_the_past_verifies_and_is_exposed(harness: Harness):
    ctx = await accepted(harness, harness.context(deadline_ms=int(NOW * 1000) - 1))
    assert ctx.deadline_ms == int(NOW * 1000) - 1


async def test_deadline_defaults_to_sixty_seconds(harness: Harness):
    ctx = await accepted(harness, harness.context(deadline_ms=None))
    assert ctx.deadline_ms == int(NOW * 1000) + 60_000


def test_parse_instant_ms():
    assert parse_instant_ms("2026-01-01T00:00:00.000Z") == int(NOW * 1000)
    assert parse_instant_ms("2028-02-29T23:59:59.999Z") == 1835481599999
    assert parse_instant_ms("1970-01-01T00:00:00.001Z") == 1
    for bad in ["2027-02-29T00:00:00.000Z", "2026-13-01T00:00:00.000Z", "2026-01-01T00:60:00.000Z"]:
        with pytest.raises(ValueError):
            parse_instant_ms(bad)


# --- tools ---------------------------------------------------------------------------------


async def test_tools_subset_and_empty_accepted(harness: Harness):
    ctx = await accepted(harness, harness.context(tools=[]))
    assert ctx.tools == frozenset()
    ctx = await accepted(harness, harness.context(tools=["engram_memory_get", "engram_memory_forget"]))
    assert ctx.tools == frozenset({"engram_memory_get", "engram_memory_forget"})
    ctx = await accepted(harness, harness.context(tools=list(TOOL_NAMES)))
    assert ctx.tools == frozenset(TOOL_NAMES)


@pytest.mark.parametrize(
    "tools",
    [
        ["engram_memory_search", "engram_memory_search"],
        ["engram_memory_admin"],
        ["ENGRAM_MEMORY_SEARCH"],
        [1],
        [None],
        "engram_memory_search",
        {"engram_memory_search": True},
        None,
    ],
)
async def test_bad_tools_refused(harness: Harness, tools):
    await refused(harness, harness.context(extra_claims={"tools": tools}))


# --- tenants ---------------------------------------------------------------------------------


async def test_tenant_not_allowed_for_host_refused(harness: Harness):
    await accepted(harness, harness.context(tenant="beta"))
    await refused(harness, harness.context(tenant="other-tenant"))  # allowed for host-b only
    await accepted(harness, harness.context(host=harness.other, tenant="other-tenant"))


# --- replay -----------------------------------------------------------------------------------


async def test_replayed_context_refused(harness: Harness):
    token = harness.context()
    await accepted(harness, token)
    await refused(harness, token)
    await refused(harness, None, token)


async def test_reused_jti_in_a_fresh_token_refused(harness: Harness):
    await accepted(harness, harness.context(jti="shared-jti-000001"))
    await refused(harness, harness.context(jti="shared-jti-000001", session="session-2"))


async def test_same_jti_from_two_hosts_is_independent(harness: Harness):
    await accepted(harness, harness.context(jti="shared-jti-000002"))
    await accepted(harness, harness.context(host=harness.other, jti="shared-jti-000002"))


async def test_invalid_token_does_not_burn_its_jti(harness: Harness):
    jti = "victim-jti-000001"
    await refused(harness, harness.context(jti=jti, audience="wrong"))
    await refused(harness, harness.context(jti=jti, tenant="other-tenant"))
    await refused(harness, harness.context(host=new_host(HOST_ID, [TENANT]), jti=jti))
    await accepted(harness, harness.context(jti=jti))


async def test_replay_key_is_a_digest_with_bounded_ttl(harness: Harness, redis_client: aioredis.Redis, replay_prefix: str):
    jti = "digest-check-jti-0001"
    token = harness.context(jti=jti, ttl_seconds=100)
    harness.clock.now = NOW + 40
    await accepted(harness, token)
    expected = replay_prefix + "ctx:" + hashlib.sha256(f"{HOST_ID}\0{jti}".encode()).hexdigest()
    ttl = await redis_client.ttl(expected)
    assert 60 < ttl <= 65  # remaining lifetime (60 s) + skew (5 s)
    keys = [k async for k in redis_client.scan_iter(match=replay_prefix + "*")]
    assert all(jti.encode() not in k and token.encode()[:40] not in k for k in keys)


async def test_redis_unreachable_is_an_unverifiable_context_not_a_refusal(harness: Harness):
    """Infrastructure, not trust: a signed context whose jti cannot be checked is
    ContextUnverifiable (the gateway answers STORE_UNAVAILABLE); a forged one is still -32603."""
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    verifier = ContextVerifier(harness.registry, AUDIENCE, ReplayGuard(dead, timeout_seconds=0.3), clock=harness.clock)
    try:
        with pytest.raises(ContextUnverifiable) as info:
            await verifier.verify(harness.context(audit_id="audit-down"), None)
        assert info.value.context.audit_id == "audit-down"
        forged = harness.context(host=new_host(HOST_ID, [TENANT]))
        with pytest.raises(ProtocolRefusal) as refusal:
            await verifier.verify(forged, None)
        assert refusal.value.jsonrpc_code == JSONRPC_INTERNAL_ERROR
    finally:
        await dead.aclose()


@pytest.fixture
def own_redis(tmp_path) -> Iterator[tuple[ChildProcess, Path]]:
    """A redis-server of this test alone, with an append-only file in ``tmp_path``."""
    child = start_redis(data_dir=tmp_path / "redis")
    yield child, tmp_path / "redis"
    child.stop()


def restart_without_data(child: ChildProcess, data: Path) -> None:
    child.stop()
    shutil.rmtree(data)  # what a restart without persistence keeps: nothing
    data.mkdir()
    child.start()


@pytest.mark.parametrize("keep_data", [False, True], ids=["no-persistence", "aof-kept"])
async def test_context_never_accepted_twice_across_a_redis_restart(harness: Harness, own_redis, keep_data: bool):
    child, data = own_redis
    guard = ReplayGuard.connect(child.url, prefix="t:jti:", timeout_seconds=2.0, clock=harness.clock)
    verifier = ContextVerifier(harness.registry, AUDIENCE, guard, clock=harness.clock)
    try:
        await guard.start()
        used = harness.context(jti="u" * 20)
        await verifier.verify(used, None)
        harness.clock.advance(1.0)
        if keep_data:
            child.stop()
            child.start()
        else:
            restart_without_data(child, data)
        # Issued before the restart: the store cannot vouch for it (retriable), never accepted.
        with pytest.raises(ContextUnverifiable):
            await verifier.verify(used, None)
        with pytest.raises(ContextUnverifiable):
            await verifier.verify(harness.context(jti="v" * 20, now=NOW + 0.5), None)
        # Issued after it: accepted once, then refused as a replay.
        fresh = harness.context(jti="w" * 20, now=NOW + 1.0)
        await verifier.verify(fresh, None)
        with pytest.raises(ProtocolRefusal):
            await verifier.verify(fresh, None)
    finally:
        await guard.redis.aclose()


async def test_epoch_stays_while_the_server_runs(harness: Harness, own_redis):
    """New connections to the same server (same run_id) do not move the epoch."""
    child, _ = own_redis
    guard = ReplayGuard.connect(child.url, prefix="t:jti:", clock=harness.clock)
    verifier = ContextVerifier(harness.registry, AUDIENCE, guard, clock=harness.clock)
    try:
        await guard.start()
        harness.clock.advance(5.0)
        await guard.redis.connection_pool.disconnect()
        other = ReplayGuard.connect(child.url, prefix="t:jti:", clock=harness.clock)
        await other.start()
        await other.redis.aclose()
        await verifier.verify(harness.context(jti="x" * 20, now=NOW + 1.0), None)
    finally:
        await guard.redis.aclose()


# --- registry hot reload ------------------------------------------------------------------------


async def test_host_registered_on_a_running_gateway(harness: Harness):
    newcomer = new_host("host-new", ["gamma"])
    await refused(harness, harness.context(host=newcomer, tenant="gamma"))
    upsert_host(str(harness.registry_path), newcomer.host_id, newcomer.public_key, newcomer.tenants)
    await refused(harness, harness.context(host=newcomer, tenant="gamma"))  # not re-read within the second
    harness.mono.advance(1.0)
    await accepted(harness, harness.context(host=newcomer, tenant="gamma"))


async def test_tenant_revoked_by_reload(harness: Harness):
    await accepted(harness, harness.context(tenant="beta"))
    upsert_host(str(harness.registry_path), HOST_ID, harness.host.public_key, [TENANT])
    harness.mono.advance(1.0)
    await refused(harness, harness.context(tenant="beta"))
    await accepted(harness, harness.context(tenant=TENANT))
