"""canonical_with_digest: one serialisation, the same bytes as canonicalize(with_digest(...))."""

from __future__ import annotations

import random

import pytest

from engram_core.canonical import canonicalize
from engram_core.digests import canonical_with_digest, with_digest


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(6 if depth < 3 else 4)
    if kind == 0:
        return rng.randrange(-10**6, 10**6)
    if kind == 1:
        return rng.random() * 10 ** rng.randrange(-5, 6)
    if kind == 2:
        return "".join(rng.choice("aZ\u00e9\u20ac\"\\\n\U0001f600") for _ in range(rng.randrange(5)))
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return _object(rng, depth + 1)


def _object(rng: random.Random, depth: int = 0) -> dict[str, object]:
    keys = ["records", "rank_receipt", "next_page_cursor", "zeta", "\u00e9t\u00e9", "a", "", "response_digesu"]
    return {k: _value(rng, depth) for k in rng.sample(keys, rng.randrange(len(keys) + 1))}


@pytest.mark.parametrize("seed", range(300))
def test_matches_with_digest(seed: int) -> None:
    obj = _object(random.Random(seed))
    expected = canonicalize(with_digest("response", obj, "response_digest"))
    assert canonical_with_digest("response", obj, "response_digest") == expected


def test_empty_object_and_first_sorting_field() -> None:
    assert canonical_with_digest("rank", {}, "d") == canonicalize(with_digest("rank", {}, "d"))
    # The field sorts before a key: the slow path still answers the canonical bytes.
    assert canonical_with_digest("rank", {"z": 1}, "d") == canonicalize(with_digest("rank", {"z": 1}, "d"))


def test_refuses_a_set_field_and_an_unknown_kind() -> None:
    with pytest.raises(ValueError):
        canonical_with_digest("response", {"response_digest": "x"}, "response_digest")
    with pytest.raises(ValueError):
        canonical_with_digest("nope", {}, "response_digest")
