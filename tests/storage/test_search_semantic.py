"""The semantic channel through a real SearchService over gRPC, fed by a real StorageService:
its health states (on, off by configuration, refused model, failed on a scope) decide the
channels a rank receipt names, ``lexical_and_semantic`` is RANKING_UNAVAILABLE whenever the
channel is not there (never a silent lexical fallback), a paraphrase is found, and a forgotten
record's vectors are gone from the projection."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram_api.common.v1 import common_pb2
from engram_api.search.v1 import search_pb2, search_pb2_grpc
from engram_core.canonical import canonicalize
from engram_core.schemas.validate import with_defaults
from engram_hostkit.examples import make_search_args
from search_service import embedding
from search_service.cursors import CursorCodec
from search_service.embedding import Embedder
from search_service.projection import EMBEDDING_FAILED, Projections
from search_service.server import load_embedder
from search_service.service import SEMANTIC_DISABLED, SearchServicer
from search_service.settings import SearchSettings
from tests.storage.helpers import Storage, Who, accepted_record, enable, rpc_code, serving_search, transition_request

FORGET = "engram_memory_forget"


@pytest.fixture(scope="module")
def model() -> Embedder:
    return Embedder.load(threads=1)


@asynccontextmanager
async def serving(storage: Storage, embedder: Embedder | None,
                  reason: str = SEMANTIC_DISABLED) -> AsyncIterator[tuple[search_pb2_grpc.SearchServiceStub, SearchServicer]]:
    projections = Projections(storage.stub, 30.0, embedder=embedder)  # type: ignore[arg-type]
    servicer = SearchServicer(projections, CursorCodec(b"k" * 32), embedder=embedder, semantic_off=reason)
    async with serving_search(servicer) as stub:
        yield stub, servicer


def request(who: Who, query: str, channels: str = "lexical") -> search_pb2.SearchRequest:
    caller = common_pb2.Caller(scope=who.scope, principal=who.principal, purpose_ref="purpose:test")
    args = make_search_args(query)
    args["capability_policy"] = {"minimum_channels": channels, "network": "forbid"}
    return search_pb2.SearchRequest(caller=caller, arguments_json=canonicalize(with_defaults("engram_memory_search", args)))


async def answer(stub: search_pb2_grpc.SearchServiceStub, who: Who, query: str, channels: str = "lexical") -> dict[str, Any]:
    value: dict[str, Any] = json.loads((await stub.Search(request(who, query, channels), timeout=30)).value_json)
    return value


def ids(value: dict[str, Any]) -> list[str]:
    return [packet["record"]["record_id"] for packet in value["records"]]


async def scope_with_pets(storage: Storage) -> tuple[Who, dict[str, str]]:
    who = Who()
    await enable(storage, who)
    made = {}
    for name, text in (("pet", "Her dog is called Biscuit and sleeps by the heater."),
                       ("car", "The blue sedan needs new tyres before winter."),
                       ("tax", "Quarterly VAT returns are filed on the fifth.")):
        _, made[name] = await accepted_record(storage, who, text)
    return who, made


async def test_a_healthy_channel_fuses_both_and_finds_a_paraphrase(storage: Storage, model: Embedder) -> None:
    who, made = await scope_with_pets(storage)
    async with serving(storage, model) as (stub, servicer):
        value = await answer(stub, who, "which puppy does she own", "lexical_and_semantic")
        receipt = value["rank_receipt"]
        assert [c["channel"] for c in receipt["channels"]] == ["lexical", "semantic"]
        assert receipt["channels"][0]["index_cursor"] == receipt["channels"][1]["index_cursor"]
        assert "unavailable_channels" not in receipt
        assert ids(value)[0] == made["pet"]  # no token in common with the record
        fused_digest = receipt["profile_config_digest"]
        lexical = await answer(stub, who, "sedan tyres")
        assert ids(lexical)[0] == made["car"]
        assert servicer.surfaces == ("lexical_index", "page_cache", "vectors")
    async with serving(storage, None) as (stub, _):
        plain = (await answer(stub, who, "sedan tyres"))["rank_receipt"]
    # The model's id and checksums are in the fused profile's config digest, not the lexical one's.
    assert plain["profile_config_digest"] != fused_digest


async def test_off_by_configuration_is_lexical_only_and_says_so(storage: Storage) -> None:
    who, made = await scope_with_pets(storage)
    async with serving(storage, None) as (stub, servicer):
        value = await answer(stub, who, "which puppy does she own")
        assert value["records"] == []  # the lexical channel alone cannot find a paraphrase
        receipt = value["rank_receipt"]
        assert [c["channel"] for c in receipt["channels"]] == ["lexical"]
        assert receipt["unavailable_channels"] == [{"channel": "semantic", "reason": SEMANTIC_DISABLED}]
        assert ids(await answer(stub, who, "blue sedan")) == [made["car"]]
        assert await rpc_code(stub.Search(request(who, "blue sedan", "lexical_and_semantic"), timeout=30)) \
            == "RANKING_UNAVAILABLE"
        assert servicer.surfaces == ("lexical_index", "page_cache")


async def test_a_tampered_model_is_refused_and_the_service_runs_lexical_only(
        storage: Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    real: Callable[[str, str], Path] = embedding._packaged
    copy = tmp_path / "model.onnx"
    shutil.copyfile(real(embedding.MODEL_PACKAGE, embedding.MODEL_FILE), copy)
    with copy.open("r+b") as handle:
        handle.seek(4096)
        byte = handle.read(1)
        handle.seek(4096)
        handle.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setattr(embedding, "_packaged", lambda package, name: copy if name == embedding.MODEL_FILE else real(package, name))
    embedder, reason = await load_embedder(SearchSettings(cursor_key="k" * 32))
    assert embedder is None and reason == "embedding file checksum mismatch"
    assert "semantic channel off: embedding file checksum mismatch" in caplog.text
    who, _ = await scope_with_pets(storage)
    async with serving(storage, embedder, reason) as (stub, _):
        receipt = (await answer(stub, who, "blue sedan"))["rank_receipt"]
        assert receipt["unavailable_channels"] == [{"channel": "semantic", "reason": reason}]
        assert await rpc_code(stub.Search(request(who, "x", "lexical_and_semantic"), timeout=30)) == "RANKING_UNAVAILABLE"
    off, why = await load_embedder(SearchSettings(cursor_key="k" * 32, semantic_channel=False))
    assert off is None and why == SEMANTIC_DISABLED


class FailingEmbedder:
    """The real model, failing on every record batch (queries still embed)."""

    def __init__(self, model: Embedder) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def embed_many(self, texts: list[str]) -> list[np.ndarray]:
        raise RuntimeError("onnxruntime exploded")


async def test_a_model_failing_on_a_scope_turns_the_channel_off_there_only(
        storage: Storage, model: Embedder, caplog: pytest.LogCaptureFixture) -> None:
    who, made = await scope_with_pets(storage)
    failing = FailingEmbedder(model)
    async with serving(storage, failing) as (stub, _):  # type: ignore[arg-type]
        value = await answer(stub, who, "blue sedan")
        assert ids(value) == [made["car"]]  # lexical goes on
        assert value["rank_receipt"]["unavailable_channels"] == [{"channel": "semantic", "reason": EMBEDDING_FAILED}]
        assert await rpc_code(stub.Search(request(who, "blue sedan", "lexical_and_semantic"), timeout=30)) \
            == "RANKING_UNAVAILABLE"
    assert "semantic channel off scope=" in caplog.text and "onnxruntime exploded" not in caplog.text


async def test_a_forgotten_record_leaves_no_vectors(storage: Storage, model: Embedder) -> None:
    who, made = await scope_with_pets(storage)
    async with serving(storage, model) as (stub, servicer):
        assert made["pet"] in ids(await answer(stub, who, "which puppy does she own", "lexical_and_semantic"))
        projection = servicer._projections.peek(who.tenant, who.workspace)
        assert projection is not None and projection.vectors is not None
        slot = projection.table.slot(made["pet"])
        assert slot is not None and projection.vectors.vectors(slot).any()
        await storage.stub.Forget(transition_request(who, FORGET, made["pet"]))
        value = await answer(stub, who, "which puppy does she own", "lexical_and_semantic")
        assert made["pet"] not in ids(value)  # the catch-up removed it before answering
        assert not projection.vectors.vectors(slot).any()
        assert made["pet"] not in projection.table
        # The invalidation path (another replica's forget) names the vectors surface.
        reply = await stub.Invalidate(search_pb2.InvalidateRequest(scope=who.scope, record_id=made["car"]), timeout=10)
        assert "vectors" in reply.surfaces
        car_slot = projection.table.slot(made["car"])
        assert car_slot is None
