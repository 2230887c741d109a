"""The packaged embedding model: verified by checksum before use, refused with a constant
reason otherwise; unit vectors of 384 dimensions, windows of at most 256 word pieces that
overlap and cover the whole text, deterministic, and closer for a paraphrase than for an
unrelated text (the point of the semantic channel: no shared token needed)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from search_service.embedding import (
    DIMENSIONS,
    MODEL_SHA256,
    WINDOW_PIECES,
    WINDOW_STRIDE,
    Embedder,
    EmbeddingUnavailable,
    _packaged,
    MODEL_FILE,
    MODEL_PACKAGE,
    TOKENIZER_FILE,
    TOKENIZER_PACKAGE,
)


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load()


def test_vectors_are_unit_length_and_deterministic(embedder: Embedder) -> None:
    first = embedder.embed_windows("The harbour cranes stop when the wind exceeds 20 m/s.")
    assert first.shape == (1, DIMENSIONS) and first.dtype == np.float32
    assert abs(float(np.linalg.norm(first[0])) - 1.0) < 1e-5
    assert np.array_equal(first, embedder.embed_windows("The harbour cranes stop when the wind exceeds 20 m/s."))
    assert np.allclose(embedder.embed_query("The harbour cranes stop when the wind exceeds 20 m/s."), first[0],
                       atol=1e-6)


def test_a_paraphrase_is_closer_than_an_unrelated_text(embedder: Embedder) -> None:
    query = embedder.embed_query("Which database did we pick for the cache?")
    paraphrase = embedder.embed_query("We chose Redis to hold cached values.")  # no shared word
    unrelated = embedder.embed_query("The ferry timetable changes in October.")
    assert float(query @ paraphrase) > float(query @ unrelated) + 0.15


def test_long_texts_are_covered_by_overlapping_windows(embedder: Embedder) -> None:
    text = " ".join(f"word{i} lighthouse" for i in range(400))
    windows = embedder.windows(text)
    pieces = embedder.windows(text)  # same split every time
    assert windows == pieces and len(windows) > 2
    assert all(len(w) <= WINDOW_PIECES for w in windows)
    content = [w[1:-1] for w in windows]
    for earlier, later in zip(content, content[1:]):
        assert earlier[WINDOW_STRIDE:] == later[: len(earlier) - WINDOW_STRIDE]  # half overlap
    whole = embedder._tokenizer.encode(text, add_special_tokens=False).ids
    assert content[-1] == whole[-len(content[-1]):] and content[0] == whole[: len(content[0])]
    assert embedder.embed_windows(text).shape == (len(windows), DIMENSIONS)
    assert embedder.windows("")[0] == [windows[0][0], windows[0][-1]]  # [CLS] [SEP]


def test_embed_many_matches_one_at_a_time(embedder: Embedder) -> None:
    texts = ["Short.", "A somewhat longer memory about tide gauges and buoys.", " ".join(["fog"] * 600)]
    batched = embedder.embed_many(texts)
    for text, vectors in zip(texts, batched):
        assert vectors.shape == embedder.embed_windows(text).shape
        assert np.allclose(vectors, embedder.embed_windows(text), atol=1e-5)


def test_the_config_names_the_model_and_its_checksums(embedder: Embedder) -> None:
    config = embedder.config()
    assert config["model_sha256"] == MODEL_SHA256 and config["dimensions"] == DIMENSIONS
    assert config["model"] and config["tokenizer_sha256"]


def test_a_changed_model_file_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tmp_path / "model.onnx"
    shutil.copyfile(_packaged(MODEL_PACKAGE, MODEL_FILE), model)
    with model.open("r+b") as handle:
        handle.seek(4096)
        byte = handle.read(1)
        handle.seek(4096)
        handle.write(bytes([byte[0] ^ 0x01]))
    tokenizer = _packaged(TOKENIZER_PACKAGE, TOKENIZER_FILE)
    with caplog.at_level(logging.ERROR, logger="engram.search"), pytest.raises(EmbeddingUnavailable) as refused:
        Embedder(model, tokenizer)
    assert refused.value.reason == "embedding file checksum mismatch"
    assert "semantic channel off: embedding file checksum mismatch" in caplog.text
    assert str(tmp_path) not in caplog.text


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingUnavailable) as refused:
        Embedder(tmp_path / "absent.onnx", _packaged(TOKENIZER_PACKAGE, TOKENIZER_FILE))
    assert refused.value.reason == "embedding file missing"
    with pytest.raises(EmbeddingUnavailable) as refused:
        _packaged("no_such_embedding_package", "model.onnx")
    assert refused.value.reason == "embedding package not installed"


@pytest.mark.parametrize("lengths", [[], [3], [2] * 100, [10] * 31 + [200] * 40, [256] * 17, list(range(2, 257))])
def test_batches_stay_within_both_bounds_and_cover_every_window(lengths: list[int]) -> None:
    from search_service.embedding import BATCH_PIECES, BATCH_WINDOWS, _batches

    batches = _batches(lengths)
    assert [k for batch in batches for k in batch] == list(range(len(lengths)))
    for batch in batches:
        assert 1 <= len(batch) <= BATCH_WINDOWS
        assert len(batch) * lengths[batch[-1]] <= BATCH_PIECES  # ascending: the last is the longest


def test_idle_session_threads_sleep_rather_than_spin(embedder: Embedder) -> None:
    """Spinning threads took a query from ~4 to ~8 ms p50 on a busy 2-core machine."""
    from search_service.embedding import INTER_OP_SPINNING, SPINNING

    assert embedder.session_config(SPINNING) == "0"
    assert embedder.session_config(INTER_OP_SPINNING) == "0"
