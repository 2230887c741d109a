"""The semantic channel's vector index and its place in the projection: best window per record,
slot order, removal that zeroes a record's vectors at once, compaction, memory accounting."""

from __future__ import annotations

import numpy as np
import pytest

from search_service.doctable import DocTable
from search_service.embedding import DIMENSIONS, Embedder
from search_service.projection import COMPACT_MIN_DEAD, ScopeProjection
from search_service.ranking import DocMeta
from search_service.semantic import VectorIndex, record_text

from .helpers import NOW_MS, record


def unit(*hot: int) -> np.ndarray:
    vector = np.zeros(DIMENSIONS, np.float32)
    vector[list(hot)] = 1.0
    return vector / np.linalg.norm(vector)


def test_a_records_similarity_is_its_best_window() -> None:
    index = VectorIndex()
    index.add(0, np.stack([unit(0), unit(1)]))
    index.add(1, np.stack([unit(2)]))
    index.add(2, np.stack([unit(0, 2), unit(3), unit(4)]))
    sims = index.similarities(unit(1), 3)
    assert sims.tolist() == pytest.approx([1.0, 0.0, 0.0])
    sims = index.similarities(unit(2), 3)
    assert sims.tolist() == pytest.approx([0.0, 1.0, 2 ** -0.5])
    assert index.rows == 6 and index.slots == 3


def test_refusals() -> None:
    index = VectorIndex()
    with pytest.raises(ValueError):
        index.add(1, np.stack([unit(0)]))  # slots come in order
    with pytest.raises(ValueError):
        index.add(0, np.zeros((0, DIMENSIONS), np.float32))  # at least one window
    with pytest.raises(ValueError):
        index.add(0, np.zeros((1, 3), np.float32))
    index.add(0, np.stack([unit(0)]))
    with pytest.raises(ValueError):
        index.similarities(unit(0), 2)  # out of step with the table
    assert index.similarities(unit(0), 1).tolist() == pytest.approx([1.0])
    assert VectorIndex().similarities(unit(0), 0).shape == (0,)


def test_remove_zeroes_the_rows_and_compaction_drops_them() -> None:
    rng = np.random.default_rng(4)
    index, table = VectorIndex(), DocTable()
    kept: dict[str, np.ndarray] = {}
    for i in range(3000):
        windows = rng.standard_normal((int(rng.integers(1, 4)), DIMENSIONS)).astype(np.float32)
        windows /= np.linalg.norm(windows, axis=1, keepdims=True)
        slot = table.add(DocMeta(f"mem_{i:05d}", valid_from_ms=NOW_MS), accepted_at=1)
        index.add(slot, windows)
        kept[f"mem_{i:05d}"] = windows
    gone = [f"mem_{i:05d}" for i in range(0, 3000, 2)]
    for record_id in gone:
        slot = table.slot(record_id)
        assert slot is not None
        table.remove(record_id)
        index.remove(slot)
        assert not index.vectors(slot).any()  # zeroed at once, before any compaction
        del kept[record_id]
    rows_before, capacity = index.rows, index.nbytes()
    index.trim()
    assert index.nbytes() < capacity and np.array_equal(index.vectors(table.slot("mem_00001")), kept["mem_00001"])  # type: ignore[arg-type]
    remap = table.compact()
    index.remap(remap, table.size)
    assert index.slots == table.size == 1500 and index.rows < rows_before
    for record_id, windows in kept.items():
        slot = table.slot(record_id)
        assert slot is not None and np.array_equal(index.vectors(slot), windows)
    query = kept["mem_00001"][0]
    best = index.similarities(query, table.size)
    assert int(np.argmax(best)) == table.slot("mem_00001")


def test_record_text_puts_the_primary_first() -> None:
    item = record("mem_a", "the primary", others=(("context", "some context"), ("evidence", "a proof")))
    item["components"].reverse()  # primary last in payload order
    assert record_text(item) == "the primary\na proof\nsome context"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load(threads=1)


def test_a_paraphrase_shares_no_token_and_is_still_the_best(embedder: Embedder) -> None:
    """The point of the channel: the query has no word in common with the record it finds."""
    texts = {
        "mem_pet": "Her dog is called Biscuit and sleeps by the heater.",
        "mem_car": "The blue sedan needs new tyres before winter.",
        "mem_tax": "Quarterly VAT returns are filed on the fifth.",
    }
    projection = ScopeProjection(vectors=VectorIndex())
    for i, (record_id, text) in enumerate(texts.items()):
        item = record(record_id, text)
        projection.add(item, cursor=i + 1, windows=embedder.embed_windows(record_text(item)))
    query = "which puppy does she own"
    assert not projection.scores(query).any()  # no shared token: the lexical channel finds nothing
    sims = projection.similarities(embedder.embed_query(query))
    assert projection.table.ids[int(np.argmax(sims))] == "mem_pet"


def test_the_projection_removes_vectors_with_the_record(embedder: Embedder) -> None:
    projection = ScopeProjection(vectors=VectorIndex())
    total = COMPACT_MIN_DEAD + 10
    for i in range(total):
        item = record(f"mem_{i:05d}", f"harbour crane number {i}")
        projection.add(item, cursor=i + 1, windows=np.stack([unit(i % DIMENSIONS)]))
    assert projection.estimate_bytes() > projection.vectors.nbytes() > 0  # type: ignore[union-attr]
    slot = projection.table.slot("mem_00007")
    assert slot is not None and projection.vectors is not None and projection.vectors.vectors(slot).any()
    assert projection.remove("mem_00007")
    assert not projection.vectors.vectors(slot).any()
    assert projection.similarities(unit(7))[slot] == 0.0
    for i in range(COMPACT_MIN_DEAD + 5):
        projection.remove(f"mem_{i:05d}")
    # compacted: the survivors keep their own vectors under their new slots
    assert projection.table.size < total and projection.table.size == projection.vectors.slots
    assert len(projection.table) == len(projection.records) == 5
    slot = projection.table.slot(f"mem_{total - 1:05d}")
    assert slot is not None
    assert np.array_equal(projection.vectors.vectors(slot), np.stack([unit((total - 1) % DIMENSIONS)]))
    with pytest.raises(ValueError):
        projection.add(record("mem_new", "no vectors"), cursor=total + 1)  # the channel needs them
    off = ScopeProjection()
    with pytest.raises(ValueError):
        off.similarities(unit(0))
