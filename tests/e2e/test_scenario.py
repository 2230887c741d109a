"""The whole system end to end, over Streamable HTTP and stdio, with the official MCP client:
capture → request_admission → search finds it → get → forget (confirmed) → gone; a second
scope sees nothing of the first; forged, expired and replayed contexts are refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from engram_core.schemas.tools import TOOL_NAMES
from engram_hostkit import HostFile, generate_host_keys
from engram_hostkit.client import EngramClient
from engram_hostkit.examples import (
    make_capture_args,
    make_forget_args,
    make_get_args,
    make_request_admission_args,
    make_search_args,
    make_withdraw_args,
)
from engram_hostkit.tokens import CONTEXT_META_KEY, mint_context
from search_service.embedding import Embedder
from search_service.semantic import MIN_SIMILARITY
from tests.e2e.conftest import RunningStack

PURPOSE = "purpose:e2e"
TRANSPORTS = ("http", "stdio")


@asynccontextmanager
async def connect(stack: RunningStack, transport: str, **kw: object) -> AsyncIterator[EngramClient]:
    host = HostFile.load(str(stack.host_file))
    stdio = None
    if transport == "stdio":
        stdio = StdioServerParameters(
            command=sys.executable, args=["-m", "engram_cli.main", "gateway", "--stdio"], env=stack.gateway_env()
        )
    kw.setdefault("principal", "user:ada")
    kw.setdefault("purpose_ref", PURPOSE)
    async with EngramClient.connect(host, stdio=stdio, **kw) as client:  # type: ignore[arg-type]
        yield client


def value(envelope: dict) -> dict:
    assert envelope["ok"] is True, envelope
    return envelope["output"]["value"]


def code(envelope: dict) -> str:
    assert envelope["ok"] is False, envelope
    return envelope["error"]["code"]


async def until(call: Callable[[], Awaitable[dict]], done: Callable[[dict], bool], timeout: float = 20.0) -> dict:
    """Repeat ``call`` (an idempotent replay) until its value satisfies ``done``, bounded."""
    deadline = time.monotonic() + timeout
    while True:
        result = value(await call())
        if done(result) or time.monotonic() > deadline:
            assert done(result), result
            return result
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_memory_lifecycle_end_to_end(stack: RunningStack, transport: str) -> None:
    tag = uuid.uuid4().hex[:8]
    text = f"Decision {tag}: pin grpcio, grpcio-tools and protobuf together because generated code refuses older runtimes."
    async with connect(stack, transport) as memory:
        assert sorted(await memory.list_tools()) == sorted(TOOL_NAMES)

        capture = make_capture_args(idempotency_key=f"e2e-capture-{tag}-0001", text=text, purpose_ref=PURPOSE)
        first = value(await memory.call("engram_memory_capture", capture))
        assert first["status"] == "committed_pending"
        candidate_id = first["candidate_id"]
        replay = value(await memory.call("engram_memory_capture", capture))
        assert replay == {**first, "status": "duplicate_exact"}
        conflicting = make_capture_args(idempotency_key=capture["idempotency_key"], text=text + " (edited)", purpose_ref=PURPOSE)
        assert code(await memory.call("engram_memory_capture", conflicting)) == "DIGEST_CONFLICT"

        # A pending candidate is neither searchable nor readable (other tests' records of the
        # dev scope may be listed by the semantic channel; none of them carries the tag).
        pending = value(await memory.call("engram_memory_search", make_search_args(tag, PURPOSE)))["records"]
        assert [p for p in pending if tag in json.dumps(p)] == []

        admitted = value(await memory.call("engram_memory_request_admission",
                                           make_request_admission_args(candidate_id, f"e2e-admit-{tag}-00001")))
        assert admitted["replayed"] is False
        assert admitted["outcome"]["status"] == "accepted"
        record_id = admitted["outcome"]["record_id"]
        again = value(await memory.call("engram_memory_request_admission",
                                        make_request_admission_args(candidate_id, f"e2e-admit-{tag}-00001")))
        assert again["replayed"] is True and again["outcome"] == admitted["outcome"]

        found = value(await memory.call("engram_memory_search", make_search_args(f"grpcio protobuf {tag}", PURPOSE)))
        assert [p["record"]["record_id"] for p in found["records"]][:1] == [record_id]
        assert found["rank_receipt"]["profile"] == "engram-hybrid/v2"

        got = value(await memory.call("engram_memory_get", make_get_args(record_id, PURPOSE)))
        assert got["record"]["record_id"] == record_id
        assert got["record"]["components"][0]["text"] == text
        assert got["read_receipt"]["record_id"] == record_id

        forget = make_forget_args(record_id, f"e2e-forget-{tag}-00001")
        with pytest.raises(MCPError) as refused:
            await memory.call("engram_memory_forget", forget)  # no confirmation at all
        assert refused.value.code == -32603
        forgot = value(await memory.call("engram_memory_forget", forget, approver="human:ada"))
        assert forgot["receipt"]["to_state"] == "tombstoned"
        assert forgot["receipt"]["from_state"] == "accepted_current"
        # The worker destroys the data key and collects the surfaces' removal: a replay with the
        # same key reports the live status, and the coverage receipt once complete.
        finished = await until(lambda: memory.call("engram_memory_forget", forget, approver="human:ada"),
                               lambda v: v["projection_invalidation"] == "complete")
        assert finished["replayed"] is True and finished["receipt"] == forgot["receipt"]
        assert finished["coverage_receipt_digest"].startswith("sha256:")

        gone = value(await memory.call("engram_memory_search", make_search_args(f"grpcio protobuf {tag}", PURPOSE)))["records"]
        assert record_id not in [p["record"]["record_id"] for p in gone]
        assert code(await memory.call("engram_memory_get", make_get_args(record_id, PURPOSE))) == "NOT_FOUND"
        again_forget = make_forget_args(record_id, f"e2e-forget-{tag}-00002")
        assert code(await memory.call("engram_memory_forget", again_forget, approver="human:ada")) == "ALREADY_TERMINAL"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_withdraw_pending_candidate(stack: RunningStack, transport: str) -> None:
    tag = uuid.uuid4().hex[:8]
    async with connect(stack, transport) as memory:
        capture = make_capture_args(idempotency_key=f"e2e-wd-{tag}-00001", text=f"Note {tag} to withdraw", purpose_ref=PURPOSE)
        candidate_id = value(await memory.call("engram_memory_capture", capture))["candidate_id"]
        withdraw = make_withdraw_args(candidate_id, f"e2e-withdraw-{tag}-1")
        done = value(await memory.call("engram_memory_withdraw", withdraw, approver="human:ada"))
        assert done["receipt"]["to_state"] == "withdrawn" and done["replayed"] is False
        erased = await until(lambda: memory.call("engram_memory_withdraw", withdraw, approver="human:ada"),
                             lambda v: v["key_destruction"] == "complete")
        assert erased["replayed"] is True and erased["receipt"] == done["receipt"]
        admit = make_request_admission_args(candidate_id, f"e2e-admit-{tag}-00002")
        assert code(await memory.call("engram_memory_request_admission", admit)) == "ALREADY_TERMINAL"


async def test_second_scope_sees_nothing_of_the_first(stack: RunningStack) -> None:
    tag = uuid.uuid4().hex[:8]
    stack.admin("enable", "--tenant", f"other-{tag}", "--workspace", "default")
    text = f"Scoped fact {tag}: only the dev scope may see this."
    async with connect(stack, "http") as memory:
        candidate_id = value(await memory.call(
            "engram_memory_capture", make_capture_args(idempotency_key=f"e2e-scope-{tag}-01", text=text, purpose_ref=PURPOSE)
        ))["candidate_id"]
        outcome = value(await memory.call("engram_memory_request_admission",
                                          make_request_admission_args(candidate_id, f"e2e-scope-admit-{tag}")))["outcome"]
        record_id = outcome["record_id"]
    time.sleep(1.1)  # the gateway re-reads the host registry at most once a second
    async with connect(stack, "http", tenant=f"other-{tag}", workspace="default") as other:
        assert sorted(await other.list_tools()) == sorted(TOOL_NAMES)
        assert value(await other.call("engram_memory_search", make_search_args(tag, PURPOSE)))["records"] == []
        assert code(await other.call("engram_memory_get", make_get_args(record_id, PURPOSE))) == "NOT_FOUND"
        assert code(await other.call("engram_memory_request_admission",
                                     make_request_admission_args(candidate_id, f"e2e-scope-other-{tag}"))) == "NOT_FOUND"
        forget = make_forget_args(record_id, f"e2e-scope-forget-{tag}")
        assert code(await other.call("engram_memory_forget", forget, approver="human:bob")) == "NOT_FOUND"
    async with connect(stack, "http", workspace=f"not-enabled-{tag}") as off:
        assert await off.list_tools() == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_untrusted_contexts_are_refused(stack: RunningStack, transport: str) -> None:
    async with connect(stack, transport) as memory:
        host = memory.host
        search = make_search_args("anything", PURPOSE)
        forged_key, _ = generate_host_keys()
        claims = dict(host_id=host.host_id, audience=host.audience, tenant=host.tenant, workspace=host.workspace,
                      principal="user:ada", agent_id="agent:x", session="s", purpose_ref=PURPOSE, tools=TOOL_NAMES)
        forged = mint_context(forged_key, **claims)
        expired = mint_context(host.private_key, **claims, now=time.time() - 400, ttl_seconds=120)
        replayed = memory.context()
        await memory.call("engram_memory_search", search, meta={CONTEXT_META_KEY: replayed})
        for token in (forged, expired, replayed, "not-a-jws"):
            with pytest.raises(MCPError) as refused:
                await memory.call("engram_memory_search", search, meta={CONTEXT_META_KEY: token})
            assert refused.value.code == -32603
        with pytest.raises(MCPError) as refused:
            await memory.list_tools(meta={CONTEXT_META_KEY: forged})
        assert refused.value.code == -32603
        wrong_purpose = make_search_args("anything", "purpose:other")
        with pytest.raises(MCPError) as refused:
            await memory.call("engram_memory_search", wrong_purpose)
        assert refused.value.code == -32603
        with pytest.raises(MCPError) as refused:
            await memory.call("engram_memory_nonexistent", {})
        assert refused.value.code == -32602
        bad = {"query": "x", "purpose_ref": PURPOSE, "tenant": "dev"}
        assert code(await memory.call("engram_memory_search", bad)) == "INVALID_SCHEMA"


async def test_search_language_is_the_scopes_operator_setting(stack: RunningStack) -> None:
    """SPEC §9 analyzer per scope: ``engram admin enable --language de`` stems German and drops
    its stop words; switching the scope to ``none`` rebuilds the projection without either."""
    tag = uuid.uuid4().hex[:8]
    tenant = f"lang-{tag}"
    shown = json.loads(stack.admin("enable", "--tenant", tenant, "--workspace", "default", "--language", "de",
                                   "--json").stdout)
    assert shown["policy"]["language"] == "de"
    refused = subprocess.run(
        [sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(stack.state_dir), "enable",
         "--tenant", tenant, "--workspace", "default", "--language", "fr"], env=stack.env, capture_output=True, text=True)
    assert refused.returncode != 0 and "invalid choice" in refused.stderr
    time.sleep(1.1)  # the gateway re-reads the host registry at most once a second
    text = f"Die Häuser am Hafen {tag} werden im Winter geschlossen."
    async with connect(stack, "http", tenant=tenant, workspace="default") as memory:
        candidate_id = value(await memory.call(
            "engram_memory_capture", make_capture_args(idempotency_key=f"e2e-lang-{tag}-01", text=text, purpose_ref=PURPOSE)
        ))["candidate_id"]
        outcome = value(await memory.call("engram_memory_request_admission",
                                          make_request_admission_args(candidate_id, f"e2e-lang-admit-{tag}")))["outcome"]

        model = Embedder.load(threads=1)

        async def hits(query: str) -> list[str]:
            """Records the lexical channel matched. The semantic channel (an English model)
            may also list the text, e.g. for a query of German function words. With one record
            in the scope, a record first in both channels scores about 1 and one listed by a
            single channel 0.95 · 0.5 + 0.05 · recency ≈ 0.525; whether the semantic channel
            lists it is the same model's cosine against MIN_SIMILARITY, computed here."""
            found = value(await memory.call("engram_memory_search", make_search_args(query, PURPOSE)))
            assert [c["channel"] for c in found["rank_receipt"]["channels"]] == ["lexical", "semantic"]
            semantic = float(model.embed_query(query) @ model.embed_windows(text)[0]) > MIN_SIMILARITY
            return [p["record"]["record_id"] for p in found["records"] if p["score"] > 0.6 or not semantic]

        assert await hits("Haus") == [outcome["record_id"]]  # häuser -> haus (Snowball German)
        assert await hits("die werden im") == []  # German stop words only
        stack.admin("enable", "--tenant", tenant, "--workspace", "default", "--language", "none")
        assert await hits("Haus") == []  # no stemmed copy any more
        assert await hits("die werden") == [outcome["record_id"]]  # no stop list either


async def test_both_channels_through_mcp_find_a_paraphrase(stack: RunningStack) -> None:
    """SPEC §9 on the running stack: the semantic channel is healthy, a caller may require it,
    and a query sharing no word with a memory finds it (in a fresh scope: nothing else there)."""
    tag = uuid.uuid4().hex[:8]
    tenant = f"sem-{tag}"
    stack.admin("enable", "--tenant", tenant, "--workspace", "default")
    time.sleep(1.1)  # the gateway re-reads the host registry at most once a second
    texts = ["Her dog is called Biscuit and sleeps by the heater.",
             "Quarterly VAT returns are filed on the fifth."]
    both = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
    async with connect(stack, "http", tenant=tenant, workspace="default") as memory:
        ids = []
        for i, text in enumerate(texts):
            candidate_id = value(await memory.call("engram_memory_capture", make_capture_args(
                idempotency_key=f"e2e-sem-{tag}-{i:02d}", text=text, purpose_ref=PURPOSE)))["candidate_id"]
            ids.append(value(await memory.call("engram_memory_request_admission", make_request_admission_args(
                candidate_id, f"e2e-sem-admit-{tag}-{i}")))["outcome"]["record_id"])
        found = value(await memory.call("engram_memory_search",
                                        make_search_args("which puppy does she own", PURPOSE, capability_policy=both)))
        assert [p["record"]["record_id"] for p in found["records"]] == [ids[0]]  # the tax note is unrelated
        receipt = found["rank_receipt"]
        assert [c["channel"] for c in receipt["channels"]] == ["lexical", "semantic"]
        assert "unavailable_channels" not in receipt
        nothing = value(await memory.call("engram_memory_search",
                                          make_search_args("zzqx", PURPOSE, capability_policy=both)))
        assert nothing["records"] == []
