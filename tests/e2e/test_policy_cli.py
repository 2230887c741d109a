"""The scope policy through ``engram admin`` against the running stack: a grant per agent changes
what that agent's MCP session sees on its next call, edits are compare-and-set (exit 4 when
stale), bad changes are refused with their code, and the admission rules take effect at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

from engram_hostkit.examples import make_capture_args, make_request_admission_args
from engram_cli.admin import refusal_line
from engram_core.schemas.tools import TOOL_NAMES
from tests.e2e.conftest import RunningStack
from tests.e2e.test_scenario import PURPOSE, connect, value

SEARCH = "engram_memory_search"


def admin(stack: RunningStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(stack.state_dir),
                           *args], env=stack.env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


async def test_policy_edits_through_the_cli_take_effect_on_the_next_call(stack: RunningStack) -> None:
    tenant = f"policy-{uuid.uuid4().hex[:8]}"
    where = ("--tenant", tenant, "--workspace", "default")
    enabled = json.loads(admin(stack, "enable", *where, "--json").stdout)
    assert (enabled["enabled"], enabled["version"], enabled["change_cursor"]) == (True, 1, 1)
    time.sleep(1.1)  # the gateway re-reads the host registry (the dev host's tenants) once a second
    grants = json.dumps([{"subject": "agent", "id": "agent:reader", "tools": [SEARCH]}])
    async with connect(stack, "http", tenant=tenant, agent_id="agent:reader") as reader, \
            connect(stack, "http", tenant=tenant) as writer:
        assert await reader.list_tools() == list(TOOL_NAMES)
        changed = admin(stack, "policy", *where, "--set", f"grants={grants}", "--expect-version", "1",
                        "--actor", "ticket:OPS-1", "--json")
        assert changed.returncode == 0, changed.stderr
        state = json.loads(changed.stdout)
        assert (state["version"], state["changed_members"]) == (2, ["grants"])
        # Same sessions, next call: the reader agent sees search only; the other agent all six.
        assert await reader.list_tools() == [SEARCH]
        assert await writer.list_tools() == list(TOOL_NAMES)

        stale = admin(stack, "policy", *where, "--set", "retain_allowed=true", "--expect-version", "1")
        assert (stale.returncode, stale.stderr.strip()) == (4, refusal_line("POLICY_STALE"))
        invalid = admin(stack, "policy", *where, "--set", "retention_cap_ms=0")
        assert (invalid.returncode, invalid.stderr.strip()) == (1, refusal_line("INVALID_SCHEMA"))
        unparsed = admin(stack, "policy", *where, "--set", "retain_allowed")
        assert unparsed.returncode == 2 and "MEMBER=JSON" in unparsed.stderr
        assert admin(stack, "policy", *where).returncode == 2  # nothing to change

        rules = json.dumps({"adjudicate_types": ["event:decided"]})
        held_by = admin(stack, "policy", *where, "--set", f"admission={rules}")
        assert held_by.returncode == 0 and "changed: admission" in held_by.stdout
        tag = uuid.uuid4().hex[:8]
        captured = value(await writer.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-policy-capture-{tag}", text=f"A held decision {tag}.", purpose_ref=PURPOSE)))
        held = value(await writer.call("engram_memory_request_admission", make_request_admission_args(
            captured["candidate_id"], f"e2e-policy-admit-{tag}")))
        assert held["outcome"]["status"] == "pending_adjudication"

    shown = admin(stack, "show", *where)
    assert shown.returncode == 0 and "memory on, policy version 3" in shown.stdout
    assert '"adjudicate_types": ["event:decided"]' in shown.stdout
    history = json.loads(admin(stack, "history", *where, "--object", "policy", "--json").stdout)
    assert history["state"] == "version 3"
    assert [(e["operation"], e["to_state"], e["actor"]) for e in history["events"]] == [
        ("policy_change", "1", "operator"), ("policy_change", "2", "ticket:OPS-1"), ("policy_change", "3", "operator")]


async def test_an_attester_key_registered_through_the_cli_makes_records_signed(stack: RunningStack) -> None:
    from engram_hostkit import generate_host_keys, mint_attestation
    from engram_hostkit.examples import make_get_args

    tenant = f"trust-{uuid.uuid4().hex[:8]}"
    where = ("--tenant", tenant, "--workspace", "default")
    assert admin(stack, "enable", *where).returncode == 0
    private, public = generate_host_keys()
    keys = json.dumps([{"key_id": "attester-ci", "public_key": public}])
    rules = json.dumps({"require_trust": "signed"})
    changed = admin(stack, "policy", *where, "--set", f"attester_keys={keys}", "--set", f"admission={rules}")
    assert changed.returncode == 0, changed.stderr
    time.sleep(1.1)  # the gateway re-reads the host registry (the dev host's tenants) once a second
    tag = uuid.uuid4().hex[:8]
    async with connect(stack, "http", tenant=tenant) as agent:
        attested = make_capture_args(idempotency_key=f"e2e-trust-signed-{tag}", text=f"An attested decision {tag}.",
                                     purpose_ref=PURPOSE)
        attested["evidence"]["attestation"] = mint_attestation(
            "attester-ci", private, tenant=tenant, workspace="default", payload=attested["payload"],
            evidence_digest=attested["evidence"]["evidence_digest"])
        signed = value(await agent.call("engram_memory_capture", attested))
        outcome = value(await agent.call("engram_memory_request_admission", make_request_admission_args(
            signed["candidate_id"], f"e2e-trust-admit-{tag}")))["outcome"]
        assert outcome["status"] == "accepted"
        record = value(await agent.call("engram_memory_get", make_get_args(outcome["record_id"], PURPOSE)))
        assert record["record"]["trust"] == "signed"

        plain = value(await agent.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-trust-plain-{tag}", text=f"An asserted decision {tag}.", purpose_ref=PURPOSE)))
        refused = value(await agent.call("engram_memory_request_admission", make_request_admission_args(
            plain["candidate_id"], f"e2e-trust-admit-plain-{tag}")))["outcome"]
        assert refused["status"] == "rejected"

        forged = make_capture_args(idempotency_key=f"e2e-trust-forged-{tag}", text=f"A forged one {tag}.",
                                   purpose_ref=PURPOSE, attestation=attested["evidence"]["attestation"])
        envelope = await agent.call("engram_memory_capture", forged)
        assert envelope["error"]["code"] == "INVALID_SCHEMA"
