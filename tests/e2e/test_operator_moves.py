"""Operator lifecycle moves on the running stack with ``engram admin transition``: a disputed
record leaves search and get at once and comes back when resolved; a destructive move asks
first (refused without a terminal or --yes); a tombstone by the operator erases like forget."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from pymongo import MongoClient

from engram_cli.stackstate import DEV_TENANT, DEV_WORKSPACE
from engram_hostkit.examples import (make_capture_args, make_forget_args, make_get_args, make_request_admission_args,
                                     make_search_args)
from tests.e2e.conftest import RunningStack
from tests.e2e.test_scenario import PURPOSE, code, connect, value


def admin(stack: RunningStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(stack.state_dir),
                           "transition", "--tenant", DEV_TENANT, "--workspace", DEV_WORKSPACE, *args],
                          env=stack.env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


async def test_operator_moves_through_the_cli(stack: RunningStack) -> None:
    tag = uuid.uuid4().hex[:8]
    query = f"heliograph signal {tag}"
    async with connect(stack, "http") as memory:
        captured = value(await memory.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-operator-capture-{tag}", text=f"The heliograph signal {tag} means all clear.",
            purpose_ref=PURPOSE)))
        admitted = value(await memory.call("engram_memory_request_admission", make_request_admission_args(
            captured["candidate_id"], f"e2e-op-admit-{tag}")))
        record_id = admitted["outcome"]["record_id"]

        async def found() -> bool:
            hits = value(await memory.call("engram_memory_search", make_search_args(query, PURPOSE)))["records"]
            return record_id in [hit["record"]["record_id"] for hit in hits]

        assert await found()
        disputed = admin(stack, "--record", record_id, "--op", "dispute", "--reason", f"ticket:{tag}", "--json")
        assert disputed.returncode == 0, disputed.stderr
        assert json.loads(disputed.stdout)["receipt"]["to_state"] == "accepted_disputed"
        assert not await found()
        assert code(await memory.call("engram_memory_get", make_get_args(record_id, PURPOSE))) == "NOT_FOUND"
        resolved = admin(stack, "--record", record_id, "--op", "resolve_dispute", "--reason", f"ticket:{tag}")
        assert resolved.returncode == 0 and "accepted_current" in resolved.stdout  # the table
        assert await found()
        # Destructive moves ask first; without a terminal and without --yes nothing happens.
        asked = admin(stack, "--record", record_id, "--op", "tombstone", "--reason", f"ticket:{tag}")
        assert asked.returncode == 2 and "--yes" in asked.stderr
        assert await found()
        done = admin(stack, "--record", record_id, "--op", "tombstone", "--reason", f"ticket:{tag}", "--yes", "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["receipt"]["to_state"] == "tombstoned"
        assert not await found()
        again = admin(stack, "--record", record_id, "--op", "dispute", "--reason", f"ticket:{tag}")
        assert again.returncode == 1 and "ALREADY_TERMINAL" in again.stderr


def admin_cmd(stack: RunningStack, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engram_cli.main", "admin", "--state-dir", str(stack.state_dir),
                           command, "--tenant", DEV_TENANT, "--workspace", DEV_WORKSPACE, *args],
                          env=stack.env, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


async def test_adjudication_unblocks_a_held_candidate(stack: RunningStack) -> None:
    tag = uuid.uuid4().hex[:8]
    text = f"Forgotten once, offered again: the vault code rotation {tag}."
    async with connect(stack, "http") as memory:
        first = value(await memory.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-adjudicate-first-{tag}", text=text, purpose_ref=PURPOSE)))
        accepted = value(await memory.call("engram_memory_request_admission", make_request_admission_args(
            first["candidate_id"], f"e2e-adjudicate-admit-1-{tag}")))
        await memory.call("engram_memory_forget", make_forget_args(accepted["outcome"]["record_id"],
                                                                    f"e2e-adjudicate-forget-{tag}"),
                          approver="human:ada")
        # The same content again is held for a human (SPEC §10 forgotten content)...
        second = value(await memory.call("engram_memory_capture", make_capture_args(
            idempotency_key=f"e2e-adjudicate-second-{tag}", text=text, purpose_ref=PURPOSE)))
        admit = make_request_admission_args(second["candidate_id"], f"e2e-adjudicate-admit-2-{tag}")
        held = value(await memory.call("engram_memory_request_admission", admit))
        assert held["outcome"]["status"] == "pending_adjudication"
        listed = admin_cmd(stack, "pending", "--json")
        assert listed.returncode == 0, listed.stderr
        assert second["candidate_id"] in [p["candidate_id"] for p in json.loads(listed.stdout)]
        assert tag not in listed.stdout  # metadata only
        # ...until the operator decides; the agent's retry then gets the decision.
        decided = admin_cmd(stack, "adjudicate", "--candidate", second["candidate_id"], "--decision", "accept",
                            "--reason", f"ticket:{tag}")
        assert decided.returncode == 0 and "accepted" in decided.stdout, decided.stderr
        final = value(await memory.call("engram_memory_request_admission", admit))
        assert final["outcome"]["status"] == "accepted" and final["replayed"] is True


def test_history_and_journal_verification_through_the_cli(stack: RunningStack) -> None:
    checked = admin_cmd(stack, "verify-journal")
    assert checked.returncode == 0 and checked.stdout.startswith("journal intact: "), checked.stderr
    verified = json.loads(admin_cmd(stack, "verify-journal", "--json").stdout)
    assert verified["ok"] is True and verified["events"] == verified["head"] > 0
    with MongoClient(stack.env["ENGRAM_MONGO_URL"]) as client:
        record = client[stack.env["ENGRAM_MONGO_DB"]].records.find_one({"tenant": DEV_TENANT}, {"_id": 1})
    shown = admin_cmd(stack, "history", "--object", record["_id"])
    assert shown.returncode == 0 and "capture" in shown.stdout and "accept" in shown.stdout, shown.stderr
    missing = admin_cmd(stack, "history", "--object", "mem_nothing_here")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
