"""Seeded random mutations of valid arguments: the validator answers with a code, never crashes."""

from __future__ import annotations

import random

import pytest

from engram_core.errors import Code, EngramError
from engram_core.schemas import TOOL_NAMES
from engram_core.schemas.validate import validate_arguments
from engram_hostkit.examples import make_maximal_capture_args

from .helpers import NOW_MS, full_args

WEIRD = [
    None, True, False, 0, -1, 1.5, 10.0, float("nan"), 2**53, -(2**64), 10**5000, "", "a", "\ud800", "e\u0301",
    "😀" * 3000, "sha256:" + "0" * 64, "mem_abc", "cand_abc", "2030-01-01T00:00:00.000Z", [], [None], {}, {"tenant": 1},
    {1: 2}, (), b"x", object(), [[[[[[[[[[[]]]]]]]]]]], {"a": {"b": {"c": {"d": {"e": {"f": {"g": {}}}}}}}},
]


def _nodes(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, path + (i,))


def _mutate(rng: random.Random, args):
    paths = [p for p in _nodes(args) if p]
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        parent = args
        try:
            for p in path[:-1]:
                parent = parent[p]
            op = rng.random()
            if op < 0.6:
                parent[path[-1]] = rng.choice(WEIRD)
            elif op < 0.8 and isinstance(parent, dict):
                parent[rng.choice(["x", "tenant", "confirmed", path[-1] + "_", "\u212b"])] = rng.choice(WEIRD)
            elif isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, list):
                parent.append(rng.choice(WEIRD))
        except (KeyError, IndexError, TypeError):
            pass
    return args


@pytest.mark.parametrize("tool", TOOL_NAMES)
@pytest.mark.parametrize("seed", range(40))
def test_random_mutations_never_crash(tool, seed):
    rng = random.Random(f"{tool}:{seed}")
    for _ in range(10):
        args = _mutate(rng, full_args(tool))
        try:
            validate_arguments(tool, args, now_ms=NOW_MS)
        except EngramError as e:
            assert e.code in (Code.INVALID_SCHEMA, Code.INVALID_DIGEST)


@pytest.mark.parametrize("seed", range(5))
def test_random_mutations_of_the_maximal_capture_never_crash(seed):
    rng = random.Random(seed)
    args = _mutate(rng, make_maximal_capture_args())
    try:
        validate_arguments("engram_memory_capture", args, now_ms=NOW_MS)
    except EngramError as e:
        assert e.code in (Code.INVALID_SCHEMA, Code.INVALID_DIGEST)
