"""Expiry through the running stack's own sweeper: ``engram beat`` schedules the sweep (every
second here, ENGRAM_EXPIRY_SWEEP_SECONDS), the Celery worker runs it through storage, and a
record past its ``expires_at`` gets one ``expire`` event by the sweeper, its key destroyed, and
is gone from search and get — which already left it out before the sweep reached it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from engram_core.timefmt import format_instant, now_ms
from engram_hostkit.examples import make_capture_args, make_get_args, make_request_admission_args, make_search_args
from tests.e2e.conftest import RunningStack
from tests.e2e.test_operator_moves import admin_cmd
from tests.e2e.test_scenario import PURPOSE, code, connect, value

LIFETIME_MS = 3000  # long enough to capture, admit and find it first


async def test_the_sweeper_expires_a_record_past_its_expiry(stack: RunningStack) -> None:
    tag = uuid.uuid4().hex[:8]
    query = f"lighthouse keeper rota {tag}"
    expires_at = now_ms() + LIFETIME_MS
    async with connect(stack, "http") as memory:
        args = make_capture_args(idempotency_key=f"e2e-expiry-{tag}", text=f"The {query} changes weekly.",
                                 purpose_ref=PURPOSE,
                                 retention={"derivative_rule": "make-ineligible", "expires_at": format_instant(expires_at)})
        captured = value(await memory.call("engram_memory_capture", args))
        admitted = value(await memory.call("engram_memory_request_admission", make_request_admission_args(
            captured["candidate_id"], f"e2e-expiry-admit-{tag}")))
        record_id = admitted["outcome"]["record_id"]

        async def found() -> bool:
            hits = value(await memory.call("engram_memory_search", make_search_args(query, PURPOSE)))["records"]
            return record_id in [hit["record"]["record_id"] for hit in hits]

        assert await found(), "found while it is live"
        # The sweep runs every second: wait (bounded) for the sweeper's expire event.
        deadline = time.monotonic() + (LIFETIME_MS / 1000) + 20
        events: list[dict] = []
        while time.monotonic() < deadline:
            shown = admin_cmd(stack, "history", "--object", record_id, "--json")
            assert shown.returncode == 0, shown.stderr
            events = [e for e in json.loads(shown.stdout)["events"] if e["operation"] == "expire"]
            if events:
                break
            if now_ms() > expires_at:
                # Past its expiry, not yet swept: every read already leaves it out.
                assert not await found()
            await asyncio.sleep(0.2)
        assert [(e["from_state"], e["to_state"], e["actor"]) for e in events] == [
            ("accepted_current", "expired", "sweeper")]
        assert not await found()
        assert code(await memory.call("engram_memory_get", make_get_args(record_id, PURPOSE))) == "NOT_FOUND"
