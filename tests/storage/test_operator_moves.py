"""The operator's lifecycle moves through AdminService.TransitionRecord and the one transition
engine: the lifecycle table exhaustively (every legal pair moves, every illegal pair is refused
before a cursor is taken, tombstone dominant), the effects of each move (search/get removal,
key destruction), supersession and rewind, and the refusals of bad requests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engram_api.admin.v1 import admin_pb2
from engram_api.storage.v1 import storage_pb2
from engram_core.taskq import DESTROY_KEY, INVALIDATE_PROJECTION
from storage_service.lifecycle import (
    ACCEPTED_CURRENT, ACCEPTED_DISPUTED, EXPIRED, HISTORICAL, RECORD_STATES, TOMBSTONED, TRANSITIONS, TRUST_INVALID,
)
from storage_service.operator import OPERATOR_MOVES
from storage_service.store import Scope
from tests.storage.helpers import BEARER, Storage, Who, accepted_record, enable, rpc_code

# How a fresh current record reaches each state by operator moves.
ROUTE = {
    ACCEPTED_CURRENT: [],
    ACCEPTED_DISPUTED: ["dispute"],
    HISTORICAL: ["mark_non_current"],
    EXPIRED: ["expire"],
    TRUST_INVALID: ["trust_invalidate"],
    TOMBSTONED: ["tombstone"],
}


async def move(storage: Storage, who: Who, record_id: str, operation: str, **kw: str) -> dict[str, Any]:
    request = admin_pb2.TransitionRecordRequest(scope=who.scope, record_id=record_id, operation=operation,
                                                reason_ref=kw.pop("reason_ref", "ticket:ops-1"), **kw)
    return json.loads((await storage.admin.TransitionRecord(request, metadata=BEARER)).value_json)


async def head(storage: Storage, who: Who) -> int:
    doc = await storage.deps.store.scopes.find_one({"_id": Scope(who.tenant, who.workspace).key}, {"head": 1})
    return int(doc["head"])


async def state_of(storage: Storage, record_id: str) -> str:
    return str((await storage.deps.store.records.find_one({"_id": record_id}, {"state": 1}))["state"])


def test_every_operator_move_is_in_the_lifecycle_table() -> None:
    assert set(OPERATOR_MOVES) == {op for op, _ in TRANSITIONS} - {"capture", "accept", "reject", "duplicate",
                                                                   "hold", "withdraw"}


async def test_the_lifecycle_table_exhaustively(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    n = 0
    for state in sorted(RECORD_STATES):
        for operation in OPERATOR_MOVES:
            n += 1
            _, record_id = await accepted_record(storage, who, f"Table case {n}: {state} by {operation}.")
            for step in ROUTE[state]:
                await move(storage, who, record_id, step)
            assert await state_of(storage, record_id) == state
            kw = {}
            if operation == "supersede":
                kw["related_record_id"] = (await accepted_record(storage, who, f"Successor of case {n}."))[1]
            before = await head(storage, who)
            legal = TRANSITIONS.get((operation, state))
            if legal is None:
                expected = "ALREADY_TERMINAL" if state == TOMBSTONED else "ILLEGAL_TRANSITION"
                assert await rpc_code(storage.admin.TransitionRecord(admin_pb2.TransitionRecordRequest(
                    scope=who.scope, record_id=record_id, operation=operation, reason_ref="ticket:x", **kw),
                    metadata=BEARER)) == expected, (operation, state)
                assert await head(storage, who) == before, (operation, state)  # no cursor taken
                assert await state_of(storage, record_id) == state
            else:
                answer = await move(storage, who, record_id, operation, **kw)
                receipt = answer["receipt"]
                assert (receipt["from_state"], receipt["to_state"]) == (state, legal), (operation, state)
                assert int(receipt["cursor"]) == before + 1
                assert await state_of(storage, record_id) == legal


async def test_leaving_current_removes_from_get_and_resolving_brings_it_back(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, "Disputed, then resolved.")
    await move(storage, who, record_id, "dispute")
    get = storage_pb2.GetRecordRequest(caller=who.caller, record_id=record_id)
    assert await rpc_code(storage.stub.GetRecord(get)) == "NOT_FOUND"
    fetched = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(scope=who.scope, record_ids=[record_id]))
    assert [(r.state, r.record_json) for r in fetched.records] == [(ACCEPTED_DISPUTED, b"")]
    tasks = [row["task"] async for row in storage.deps.store.outbox.find({"object_id": record_id})]
    assert INVALIDATE_PROJECTION in tasks and DESTROY_KEY not in tasks  # set aside, not erased
    answer = await move(storage, who, record_id, "resolve_dispute")
    assert answer["receipt"]["to_state"] == ACCEPTED_CURRENT
    assert json.loads((await storage.stub.GetRecord(
        storage_pb2.GetRecordRequest(caller=who.caller, record_id=record_id))).record_json)["record_id"] == record_id
    # The other resolution ends it historical.
    _, other = await accepted_record(storage, who, "Disputed, then set aside.")
    await move(storage, who, other, "dispute")
    assert (await move(storage, who, other, "resolve_dispute", to_state=HISTORICAL))["receipt"]["to_state"] == HISTORICAL


async def test_expire_and_tombstone_destroy_the_key(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    for operation in ("expire", "tombstone"):
        _, record_id = await accepted_record(storage, who, f"Erased by the operator's {operation}.")
        await move(storage, who, record_id, operation)
        tasks = sorted([row["task"] async for row in storage.deps.store.outbox.find({"object_id": record_id})])
        assert tasks == sorted([DESTROY_KEY, INVALIDATE_PROJECTION]), operation
    assert await storage.deps.store.forgotten.count_documents({"scope": Scope(who.tenant, who.workspace).key}) == 1


async def test_supersede_then_rewind_swaps_the_current_record_atomically(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, old = await accepted_record(storage, who, "The office opens at eight.")
    _, new = await accepted_record(storage, who, "The office opens at nine.")
    superseded = await move(storage, who, old, "supersede", related_record_id=new)
    assert superseded["receipt"]["to_state"] == HISTORICAL and "related" not in superseded
    assert (await storage.deps.store.records.find_one({"_id": old}))["superseded_by"] == new
    before = await head(storage, who)
    rewound = await move(storage, who, old, "rewind")
    assert (rewound["receipt"]["from_state"], rewound["receipt"]["to_state"]) == (HISTORICAL, ACCEPTED_CURRENT)
    assert rewound["related"]["record_id"] == new and rewound["related"]["to_state"] == HISTORICAL
    assert [int(rewound["receipt"]["cursor"]), int(rewound["related"]["cursor"])] == [before + 1, before + 2]
    assert (await state_of(storage, old), await state_of(storage, new)) == (ACCEPTED_CURRENT, HISTORICAL)
    assert await rpc_code(storage.stub.GetRecord(storage_pb2.GetRecordRequest(caller=who.caller, record_id=new))) \
        == "NOT_FOUND"


@pytest.mark.parametrize(("change", "code"), [
    ({"operation": "accept"}, "INVALID_SCHEMA"),
    ({"operation": "withdraw"}, "INVALID_SCHEMA"),
    ({"operation": "supersede"}, "INVALID_SCHEMA"),  # no successor
    ({"operation": "dispute", "to_state": HISTORICAL}, "INVALID_SCHEMA"),
    ({"operation": "dispute", "related_record_id": "mem_x"}, "INVALID_SCHEMA"),
    ({"operation": "dispute", "reason_ref": ""}, "INVALID_SCHEMA"),
    ({"operation": "dispute", "reason_ref": "r" * 513}, "INVALID_SCHEMA"),
    ({"operation": "dispute", "record_id": "mem_unknown"}, "NOT_FOUND"),
    ({"operation": "supersede", "related_record_id": "mem_unknown"}, "ILLEGAL_TRANSITION"),
    ({"operation": "resolve_dispute", "to_state": TOMBSTONED}, "ILLEGAL_TRANSITION"),
])
async def test_bad_requests_are_refused_and_change_nothing(storage: Storage, change: dict[str, str], code: str) -> None:
    who = Who()
    await enable(storage, who)
    _, record_id = await accepted_record(storage, who, f"Untouched by a bad request {sorted(change.items())}.")
    if change.get("operation") == "resolve_dispute":
        await move(storage, who, record_id, "dispute")
    before = await head(storage, who)
    fields = {"scope": who.scope, "record_id": record_id, "reason_ref": "ticket:x", **change}
    assert await rpc_code(storage.admin.TransitionRecord(admin_pb2.TransitionRecordRequest(**fields),
                                                         metadata=BEARER)) == code
    assert await head(storage, who) == before


async def test_another_scopes_record_is_not_found_and_the_token_is_required(storage: Storage) -> None:
    who, other = Who(), Who()
    await enable(storage, who)
    await enable(storage, other)
    _, record_id = await accepted_record(storage, who, "Only in the first scope.")
    assert await rpc_code(storage.admin.TransitionRecord(admin_pb2.TransitionRecordRequest(
        scope=other.scope, record_id=record_id, operation="dispute", reason_ref="ticket:x"), metadata=BEARER)) \
        == "NOT_FOUND"
    with pytest.raises(Exception) as refused:
        await storage.admin.TransitionRecord(admin_pb2.TransitionRecordRequest(
            scope=who.scope, record_id=record_id, operation="dispute", reason_ref="ticket:x"))
    assert "UNAUTHENTICATED" in str(refused.value)
    assert await state_of(storage, record_id) == ACCEPTED_CURRENT
