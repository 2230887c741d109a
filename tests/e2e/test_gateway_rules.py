"""Gateway rules over the running stack: visibility (host opt-in ∩ operator grants), hidden
tools refused, confirmation-required capture, deadlines, and the Engram-Context header."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from engram_hostkit.examples import make_capture_args, make_get_args, make_search_args
from engram_hostkit.tokens import CONFIRMATION_META_KEY, CONTEXT_META_KEY
from engram_core.timefmt import now_ms
from tests.e2e.conftest import RunningStack
from tests.e2e.test_scenario import PURPOSE, code, connect, value

SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"


@pytest.fixture(scope="module")
def scopes(stack: RunningStack) -> dict[str, str]:
    """Two extra tenants: one granted search+get only, one requiring confirmed captures."""
    tag = uuid.uuid4().hex[:8]
    names = {"granted": f"granted-{tag}", "confirm": f"confirm-{tag}"}
    stack.admin("enable", "--tenant", names["granted"], "--workspace", "default", "--tools", SEARCH, GET)
    stack.admin("enable", "--tenant", names["confirm"], "--workspace", "default", "--confirm", CAPTURE)
    time.sleep(1.1)  # the gateway re-reads the host registry at most once a second
    return names


async def test_host_opt_in_limits_the_visible_tools(stack: RunningStack) -> None:
    async with connect(stack, "http", tools=[SEARCH]) as memory:
        assert await memory.list_tools() == [SEARCH]
        with pytest.raises(MCPError) as refused:
            await memory.call(GET, make_get_args("mem_" + "a" * 52, PURPOSE))
        assert refused.value.code == -32602


async def test_operator_grants_limit_the_visible_tools(stack: RunningStack, scopes: dict[str, str]) -> None:
    async with connect(stack, "http", tenant=scopes["granted"]) as memory:
        assert await memory.list_tools() == [SEARCH, GET]
        with pytest.raises(MCPError) as refused:
            await memory.call(CAPTURE, make_capture_args(idempotency_key="hidden-capture-0001", purpose_ref=PURPOSE))
        assert refused.value.code == -32602
        assert value(await memory.call(SEARCH, make_search_args("anything", PURPOSE)))["records"] == []


async def test_a_scope_can_require_confirmed_captures(stack: RunningStack, scopes: dict[str, str]) -> None:
    async with connect(stack, "http", tenant=scopes["confirm"]) as memory:
        args = make_capture_args(idempotency_key=f"confirmed-{uuid.uuid4().hex}", purpose_ref=PURPOSE)
        with pytest.raises(MCPError) as refused:
            await memory.call(CAPTURE, args)
        assert refused.value.code == -32603
        other = make_capture_args(idempotency_key=f"other-key-{uuid.uuid4().hex}", purpose_ref=PURPOSE)
        wrong = {CONTEXT_META_KEY: memory.context(),
                 CONFIRMATION_META_KEY: memory.confirmation(CAPTURE, other, "human:ada")}
        assert code(await memory.call(CAPTURE, args, meta=wrong)) == "gate_failed"
        assert value(await memory.call(CAPTURE, args, approver="human:ada"))["status"] == "committed_pending"


async def test_a_past_deadline_is_deadline_exceeded(stack: RunningStack) -> None:
    async with connect(stack, "http") as memory:
        meta = {CONTEXT_META_KEY: memory.context(deadline_ms=now_ms() - 1000)}
        envelope = await memory.call(SEARCH, make_search_args("anything", PURPOSE), meta=meta)
        assert code(envelope) == "DEADLINE_EXCEEDED" and envelope["error"]["retriable"] is True


def _rpc(stack: RunningStack, meta: dict[str, str], headers: dict[str, str]) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    reply = httpx.post(stack.mcp_url, json=body, timeout=10, headers={
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18", **headers})
    return reply.json()


async def test_context_header_and_source_conflict(stack: RunningStack) -> None:
    async with connect(stack, "http") as memory:
        by_header = _rpc(stack, {}, {"Engram-Context": memory.context()})
        assert len(by_header["result"]["tools"]) == 6
        same = memory.context()
        assert len(_rpc(stack, {CONTEXT_META_KEY: same}, {"Engram-Context": same})["result"]["tools"]) == 6
        conflict = _rpc(stack, {CONTEXT_META_KEY: memory.context()}, {"Engram-Context": memory.context()})
        assert conflict["error"]["code"] == -32603
        assert conflict["error"]["message"] == "Trusted invocation context unavailable"


async def test_the_operator_credential_is_no_mcp_context(stack: RunningStack) -> None:
    """The AdminService's bearer token opens nothing on the agent path: as the context (meta or
    header, bare or as a bearer) every MCP request is refused as untrusted."""
    token = (stack.state_dir / "admin-token").read_text().strip()
    for meta, headers in (({CONTEXT_META_KEY: token}, {}), ({}, {"Engram-Context": token}),
                          ({}, {"Engram-Context": f"Bearer {token}", "Authorization": f"Bearer {token}"}),
                          ({}, {"Authorization": f"Bearer {token}"})):
        refused = _rpc(stack, meta, headers)
        assert refused["error"]["code"] == -32603, refused
    async with connect(stack, "http") as memory:
        with pytest.raises(MCPError) as call:
            await memory.call(SEARCH, make_search_args("anything", PURPOSE), meta={CONTEXT_META_KEY: token})
        assert call.value.code == -32603


async def test_admission_past_its_deadline_is_outcome_unknown_and_a_retry_collects_it(stack: RunningStack) -> None:
    async with connect(stack, "http") as memory:
        capture = make_capture_args(idempotency_key=f"slow-{uuid.uuid4().hex}", text="Decided while nobody waited.",
                                    purpose_ref=PURPOSE)
        candidate_id = value(await memory.call(CAPTURE, capture))["candidate_id"]
        admit = {"candidate_id": candidate_id, "idempotency_key": f"slow-admit-{uuid.uuid4().hex}"}
        hurried = {CONTEXT_META_KEY: memory.context(deadline_ms=now_ms() + 60)}
        first = await memory.call("engram_memory_request_admission", admit, meta=hurried)
        assert code(first) in ("MUTATION_OUTCOME_UNKNOWN", "DEADLINE_EXCEEDED") and first["error"]["retriable"]
        retry = value(await memory.call("engram_memory_request_admission", admit))
        assert retry["outcome"]["status"] == "accepted" and retry["outcome"]["record_id"].startswith("mem_")


def test_the_http_edge_refuses_get_and_oversize_bodies_with_a_json_rpc_error(stack: RunningStack) -> None:
    from gateway.http_guard import BODY_TOO_LARGE, METHOD_NOT_ALLOWED

    url = stack.mcp_url
    got = httpx.get(url, timeout=5, headers={"accept": "text/event-stream"})  # stateless: no stream is opened
    assert got.status_code == 405 and got.json()["error"] == {"code": -32600, "message": METHOD_NOT_ALLOWED}
    assert got.headers["allow"] == "POST"
    oversize = httpx.post(url, content=b"{" + b" " * (4 * 1024 * 1024) + b"}", timeout=30,
                          headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
    assert oversize.status_code == 413 and oversize.json()["error"] == {"code": -32600, "message": BODY_TOO_LARGE}


# Requests whose SDK answers used to quote them (pydantic text with input_value, the method in
# ``data``) or were plain text; each answer must be a constant JSON-RPC error.
HOSTILE = {
    "batch": (b'[{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"FRAGMENT"}}]', -32602),
    "unknown method": (b'{"jsonrpc":"2.0","id":1,"method":"FRAGMENT"}', -32601),
    "bad params": (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5,"arguments":"FRAGMENT"}}',
                   -32602),
    "not JSON": (b'FRAGMENT{', -32700),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_protocol_errors_never_quote_the_request(stack: RunningStack, case: str) -> None:
    from gateway.http_guard import STANDARD_MESSAGES

    body, wanted = HOSTILE[case]
    reply = httpx.post(stack.mcp_url, content=body, timeout=10,
                       headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
    assert b"FRAGMENT" not in reply.content and b"input_value" not in reply.content
    error = reply.json()["error"]
    assert error == {"code": wanted, "message": STANDARD_MESSAGES[wanted]}


def test_a_plain_text_refusal_becomes_a_json_rpc_error(stack: RunningStack) -> None:
    reply = httpx.post(stack.mcp_url, content=b"{}", timeout=10,
                       headers={"content-type": "text/FRAGMENT", "accept": "application/json"})
    assert reply.status_code == 400 and b"FRAGMENT" not in reply.content
    assert reply.json()["error"] == {"code": -32600, "message": "Invalid Request"}


async def test_every_result_is_its_envelope_with_an_identical_json_text_copy(stack: RunningStack) -> None:
    """SPEC §4 through the official client: ``structuredContent`` is the envelope, the only
    ``content`` item is a JSON text of the same value, and ``isError`` is ``!ok`` — for a search
    (its value spliced in as the search service wrote it), a capture, a failed get and a refusal."""
    async with connect(stack, "http") as memory:
        await memory.call(CAPTURE, make_capture_args(idempotency_key=f"text-copy-{uuid.uuid4().hex}", purpose_ref=PURPOSE))
        calls = [
            (SEARCH, make_search_args("anything Grüße", PURPOSE), memory.context()),
            (CAPTURE, make_capture_args(idempotency_key=f"text-copy-{uuid.uuid4().hex}", purpose_ref=PURPOSE), memory.context()),
            (GET, make_get_args("mem_" + "a" * 52, PURPOSE), memory.context()),
            (SEARCH, make_search_args("anything", PURPOSE), memory.context(deadline_ms=now_ms() - 1000)),
        ]
        seen = set()
        for tool, args, context in calls:
            result = await memory.mcp.call_tool(tool, args, meta={CONTEXT_META_KEY: context})
            structured = result.structured_content
            assert isinstance(structured, dict) and len(result.content) == 1
            (item,) = result.content
            assert item.type == "text" and json.loads(item.text) == structured
            assert result.is_error is (not structured["ok"])
            seen.add(structured["ok"])
        assert seen == {True, False}
