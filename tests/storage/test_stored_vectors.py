"""Stored window vectors (storage_service.vectors): sealed under the record's own data key,
fetched with the record for their model only, kept for accepted records of the scope only,
bounded, erased with the record's key; and the search projection embeds a record once, then
every later build (any replica) takes the stored vectors."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from engram_api.storage.v1 import storage_pb2
from engram_core.digests import digest
from search_service.embedding import DIMENSIONS, Embedder, Vectors, to_wire
from search_service import projection as projection_module
from search_service.projection import Projections
from engram_core.taskq import DESTROY_KEY
from storage_service.vectors import MAX_ITEMS, MAX_RECORD_VECTOR_BYTES
from tests.storage.helpers import Storage, Who, accepted_record, enable, rpc_code, transition_request

FORGET = "engram_memory_forget"
MODEL = digest("rank", {"vectors": "test model"})
OTHER_MODEL = digest("rank", {"vectors": "another model"})


def store_request(who: Who, items: list[tuple[str, bytes]], model: str = MODEL) -> storage_pb2.StoreVectorsRequest:
    return storage_pb2.StoreVectorsRequest(scope=who.scope, vector_model=model, items=[
        storage_pb2.RecordVectors(record_id=rid, vectors=data) for rid, data in items])


async def fetch(storage: Storage, who: Who, ids: list[str], model: str = MODEL) -> dict[str, bytes]:
    reply = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(scope=who.scope, record_ids=ids,
                                                                            vector_model=model))
    return {item.record_id: item.vectors for item in reply.records}


def unit_rows(count: int, seed: int) -> bytes:
    rows = np.random.default_rng(seed).standard_normal((count, DIMENSIONS)).astype(np.float32)
    return to_wire(rows / np.linalg.norm(rows, axis=1, keepdims=True))


async def test_vectors_are_sealed_and_come_back_for_their_model_only(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, rid = await accepted_record(storage, who, "The lighthouse keeper logs the fog at dawn.")
    data = unit_rows(2, seed=1)
    assert (await storage.stub.StoreVectors(store_request(who, [(rid, data)]))).stored == 1
    assert await fetch(storage, who, [rid]) == {rid: data}
    assert await fetch(storage, who, [rid], OTHER_MODEL) == {rid: b""}
    assert await fetch(storage, who, [rid], "") == {rid: b""}
    doc = await storage.deps.store.vectors.find_one({"_id": rid})
    assert doc["model"] == MODEL and set(doc) == {"_id", "scope", "model", "blob"}
    sealed = bytes(doc["blob"]["ciphertext"])
    assert data[:64] not in sealed and len(sealed) == len(data) + 16  # AES-GCM: ciphertext and tag
    # Another model's vectors replace them (one document per record).
    assert (await storage.stub.StoreVectors(store_request(who, [(rid, unit_rows(1, seed=2))], OTHER_MODEL))).stored == 1
    assert await fetch(storage, who, [rid]) == {rid: b""}
    assert await storage.deps.store.vectors.count_documents({"_id": rid}) == 1


async def test_a_moved_blob_does_not_open(storage: Storage) -> None:
    """The AAD binds record and model: vectors copied onto another record are not served."""
    who = Who()
    await enable(storage, who)
    _, first = await accepted_record(storage, who, "First record about tides.")
    _, second = await accepted_record(storage, who, "Second record about currents.")
    await storage.stub.StoreVectors(store_request(who, [(first, unit_rows(1, seed=3))]))
    doc = await storage.deps.store.vectors.find_one({"_id": first})
    await storage.deps.store.vectors.insert_one({**doc, "_id": second})
    assert await fetch(storage, who, [first, second]) == {first: unit_rows(1, seed=3), second: b""}


async def test_only_accepted_records_of_the_scope_take_vectors(storage: Storage) -> None:
    who, other = Who(), Who()
    await enable(storage, who)
    await enable(storage, other)
    _, kept = await accepted_record(storage, who, "A fact that stays.")
    _, forgotten = await accepted_record(storage, who, "A fact that goes.")
    _, foreign = await accepted_record(storage, other, "Another scope's fact.")
    await storage.stub.Forget(transition_request(who, FORGET, forgotten))
    data = unit_rows(1, seed=4)
    items = [(kept, data), (forgotten, data), (foreign, data), ("mem_" + "b" * 52, data)]
    assert (await storage.stub.StoreVectors(store_request(who, items))).stored == 1
    assert await storage.deps.store.vectors.count_documents({"_id": {"$in": [forgotten, foreign]}}) == 0


async def test_the_bounds_of_a_store_call(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, rid = await accepted_record(storage, who, "Bounds are tested on both sides.")
    for model in ("", "sha256:abc", "md5:" + "0" * 32):
        assert await rpc_code(storage.stub.StoreVectors(store_request(who, [(rid, b"\0" * 4)], model))) == "INVALID_SCHEMA"
        assert await rpc_code(storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(
            scope=who.scope, record_ids=[rid], vector_model=model or "x"))) == "INVALID_SCHEMA"
    for bad in (b"", b"\0" * 3, b"\0" * 5, b"\0" * (MAX_RECORD_VECTOR_BYTES + 4)):
        assert await rpc_code(storage.stub.StoreVectors(store_request(who, [(rid, bad)]))) == "INVALID_SCHEMA"
    assert (await storage.stub.StoreVectors(store_request(who, [(rid, b"\0" * MAX_RECORD_VECTOR_BYTES)]))).stored == 1
    assert (await storage.stub.StoreVectors(store_request(who, [(rid, b"\0" * 4)] * MAX_ITEMS))).stored == 1
    assert await rpc_code(storage.stub.StoreVectors(store_request(who, [(rid, b"\0" * 4)] * (MAX_ITEMS + 1)))) \
        == "INVALID_SCHEMA"


async def test_replies_count_vectors_in_their_byte_budget(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    ids = [(await accepted_record(storage, who, f"Record {i} with large vectors."))[1] for i in range(3)]
    big = b"\0" * (2 * 1024 * 1024)  # three of them: more than one 4 MiB reply
    await storage.stub.StoreVectors(store_request(who, [(rid, big) for rid in ids]))
    reply = await storage.stub.FetchRecords(storage_pb2.FetchRecordsRequest(scope=who.scope, record_ids=ids,
                                                                            vector_model=MODEL))
    assert [item.record_id for item in reply.records] == ids[:1] and list(reply.deferred_ids) == ids[1:]


async def test_destroying_the_record_key_erases_its_vectors(storage: Storage) -> None:
    who = Who()
    await enable(storage, who)
    _, rid = await accepted_record(storage, who, "Forget me and my vectors.")
    await storage.stub.StoreVectors(store_request(who, [(rid, unit_rows(1, seed=5))]))
    await storage.stub.Forget(transition_request(who, FORGET, rid))
    destroy = await storage.deps.store.outbox.find_one({"object_id": rid, "task": DESTROY_KEY})
    await storage.stub.DestroyKey(storage_pb2.DestroyKeyRequest(outbox_id=destroy["_id"]))
    assert await storage.deps.store.vectors.count_documents({"_id": rid}) == 0


class CountingEmbedder:
    """The model, counting the texts it embeds for records."""

    def __init__(self, model: Embedder) -> None:
        self._model = model
        self.texts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def embed_many(self, texts: list[str]) -> list[Vectors]:
        self.texts += len(texts)
        return self._model.embed_many(texts)


@pytest.fixture(scope="module")
def model() -> Embedder:
    return Embedder.load(threads=1)


async def built(storage: Storage, who: Who, embedder: CountingEmbedder) -> tuple[Projections, Any]:
    projections = Projections(storage.stub, 30.0, embedder=embedder)  # type: ignore[arg-type]
    projection = await projections.current(who.tenant, who.workspace)
    await projections.vectors_kept()
    return projections, projection


def matrix(projection: Any, record_id: str) -> bytes:
    return hashlib.sha256(projection.vectors.vectors(projection.table.slot(record_id)).tobytes()).digest()


async def test_a_record_is_embedded_once_and_every_later_build_takes_its_stored_vectors(
        storage: Storage, model: Embedder) -> None:
    who = Who()
    await enable(storage, who)
    ids = [(await accepted_record(storage, who, text))[1] for text in (
        "Her dog is called Biscuit and sleeps by the heater.",
        "The blue sedan needs new tyres before winter. " * 60,  # several windows
    )]
    first = CountingEmbedder(model)
    _, one = await built(storage, who, first)
    assert first.texts == 2
    assert all(len(v) for v in (await fetch(storage, who, ids, model.vector_model)).values())
    second = CountingEmbedder(model)
    _, two = await built(storage, who, second)  # a fresh replica, or a rebuild
    assert second.texts == 0
    assert [matrix(one, rid) for rid in ids] == [matrix(two, rid) for rid in ids]
    # A record admitted later is embedded by the catch-up that sees it, and only that one.
    _, third = await accepted_record(storage, who, "Quarterly VAT returns are filed on the fifth.")
    projections, projection = await built(storage, who, second)
    assert second.texts == 1 and third in projection.records
    assert len((await fetch(storage, who, [third], model.vector_model))[third]) > 0
    del projections


async def test_stored_vectors_of_the_wrong_width_are_embedded_again(storage: Storage, model: Embedder) -> None:
    who = Who()
    await enable(storage, who)
    _, rid = await accepted_record(storage, who, "A record whose stored vectors were cut short.")
    await storage.stub.StoreVectors(store_request(who, [(rid, b"\0" * 8)], model.vector_model))
    counting = CountingEmbedder(model)
    _, projection = await built(storage, who, counting)
    assert counting.texts == 1 and projection.vectors.vectors(projection.table.slot(rid)).any()
    assert len((await fetch(storage, who, [rid], model.vector_model))[rid]) == DIMENSIONS * 4  # replaced


class CountingStub:
    """The storage stub, keeping the StoreVectors requests it forwards."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub
        self.stored: list[storage_pb2.StoreVectorsRequest] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)

    async def StoreVectors(self, request: storage_pb2.StoreVectorsRequest, **kwargs: Any) -> Any:  # noqa: N802
        self.stored.append(request)
        return await self._stub.StoreVectors(request, **kwargs)


async def test_fresh_vectors_go_to_storage_in_calls_within_the_byte_bound(
        storage: Storage, model: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    who = Who()
    await enable(storage, who)
    long_text = "The blue sedan needs new tyres before winter. " * 60  # several windows
    texts = ["Her dog is called Biscuit.", "The fog came in at dawn.", long_text,
             "Quarterly VAT returns are filed on the fifth.", "The keeper logs the tide."]
    ids = [(await accepted_record(storage, who, text))[1] for text in texts]
    bound = 2 * DIMENSIONS * 4  # two windows a call
    monkeypatch.setattr(projection_module, "STORE_VECTORS_BYTES", bound)
    stub = CountingStub(storage.stub)
    projections = Projections(stub, 30.0, embedder=model)  # type: ignore[arg-type]
    await projections.current(who.tenant, who.workspace)
    await projections.vectors_kept()
    sizes = [[len(item.vectors) for item in request.items] for request in stub.stored]
    assert sorted(item.record_id for request in stub.stored for item in request.items) == sorted(ids)
    # Within the bound, or a record alone that exceeds it by itself (the long one).
    assert all(sum(call) <= bound or len(call) == 1 for call in sizes), sizes
    assert [call for call in sizes if sum(call) > bound] == [[len(to_wire(model.embed_many([long_text])[0]))]]
    assert len(sizes) >= 3
    assert all(len(data) > 0 for data in (await fetch(storage, who, ids, model.vector_model)).values())
