"""RFC 8785 canonical JSON: the RFC's number and ordering examples, and refusals."""

from __future__ import annotations

import json
import math
import random

import pytest

from engram_core.canonical import SAFE_INT_MAX, Encoded, _plain, canonicalize, canonicalize_slow, format_number

# RFC 8785 Appendix B (IEEE-754 bits → ECMAScript text), a representative subset.
RFC_NUMBERS = [
    (0x0000000000000000, "0"),
    (0x8000000000000000, "0"),
    (0x0000000000000001, "5e-324"),
    (0x8000000000000001, "-5e-324"),
    (0x7FEFFFFFFFFFFFFF, "1.7976931348623157e+308"),
    (0x4340000000000000, "9007199254740992"),
    (0x44B52D02C7E14AF6, "1e+23"),
    (0x3EB0C6F7A0B5ED8D, "0.000001"),
    (0x3EB0C6F7A0B5ED8C, "9.999999999999997e-7"),
    (0x444B1AE4D6E2EF50, "1e+21"),
    (0x444B1AE4D6E2EF4F, "999999999999999900000"),
    (0x3FD3333333333333, "0.3"),
]


@pytest.mark.parametrize("bits, text", RFC_NUMBERS)
def test_rfc_number_serialisation(bits: int, text: str) -> None:
    import struct

    value = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    assert format_number(value) == text


def test_rfc_sorting_example() -> None:
    value = {"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
             "1": "One", "\U0001F600": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}
    keys = list(json.loads(canonicalize(value)))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"]


def test_no_whitespace_and_literals() -> None:
    assert canonicalize({"b": [True, False, None], "a": {}}) == b'{"a":{},"b":[true,false,null]}'


@pytest.mark.parametrize("value", [SAFE_INT_MAX, -SAFE_INT_MAX])
def test_safe_integers_pass(value: int) -> None:
    assert canonicalize(value) == str(value).encode()


@pytest.mark.parametrize("value", [SAFE_INT_MAX + 1, -SAFE_INT_MAX - 1, math.nan, math.inf, "\ud800"])
def test_values_json_cannot_carry_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        canonicalize(value)


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(TypeError):
        canonicalize({1: "x"})


# RFC 8785 §3.2.2 / Appendix: the whole-document example (structure, literals, string escapes).
RFC_DOCUMENT = {
    "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
    "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"/",
    "literals": [None, True, False],
}
RFC_DOCUMENT_JCS = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
                    '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')


def test_rfc_document_example_on_both_paths() -> None:
    assert canonicalize(RFC_DOCUMENT).decode() == RFC_DOCUMENT_JCS
    assert canonicalize_slow(RFC_DOCUMENT).decode() == RFC_DOCUMENT_JCS
    no_floats = {k: v for k, v in RFC_DOCUMENT.items() if k != "numbers"}
    assert canonicalize(no_floats) == canonicalize_slow(no_floats)


def _random_value(rng: random.Random, depth: int = 0) -> object:
    alphabet = ["a", "Z", "0", " ", '"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u0080",
                "\u00f6", "\u2028", "\u20ac", "\ue000", "\ufb33", "\uffff", "\U0001F600", "\U00010000"]
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-SAFE_INT_MAX, SAFE_INT_MAX) if rng.random() < 0.5 else rng.randint(-1000, 1000)
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e21, 1e-7, 123.456, 5e-324, 1e16])
    if kind in (4, 5):
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if kind in (6, 7):
        return {"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 5))): _random_value(rng, depth + 1)
                for _ in range(rng.randrange(6))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def test_the_fast_path_matches_the_reference_on_a_random_corpus() -> None:
    rng = random.Random(8785)
    fast_taken = 0
    for _ in range(5000):
        value = _random_value(rng)
        assert canonicalize(value) == canonicalize_slow(value), value
        fast_taken += _plain(value)
    assert fast_taken > 1000  # the corpus exercises the fast path, not only the fallback


def test_mixed_values_match_the_reference() -> None:
    """Floats beside plain subtrees (a search page: scores next to records) take the mixed
    walk; its output is the reference's."""
    rng = random.Random(2028)
    for _ in range(3000):
        value = {"score": rng.choice([0.5, 1.0, 0.0, 1e-7, 0.123456789012, 1e21]),
                 "rank": rng.randint(1, 50), "record": _random_value(rng),
                 "list": [_random_value(rng), 0.25, {"x": [_random_value(rng), 1e-7]}]}
        assert not _plain(value)
        assert canonicalize(value) == canonicalize_slow(value), value
    for bad in ({"s": 0.5, "k": {"x": "\ud800"}}, [0.5, float("nan")], {"s": 0.5, "big": SAFE_INT_MAX + 1}):
        with pytest.raises(ValueError):
            canonicalize(bad)
    with pytest.raises(TypeError):
        canonicalize({"s": 0.5, "k": {1: "x"}})


def test_an_encoded_part_serialises_as_the_value_it_stands_for() -> None:
    """A part serialised once (a search packet) is written verbatim inside a larger value."""
    rng = random.Random(1985)
    for _ in range(2000):
        part = _random_value(rng)
        whole = {"records": [part, 0.5], "n": rng.randint(0, 9), "inner": {"p": part}}
        encoded = Encoded.of(part)
        assert len(encoded) == len(canonicalize(part))
        with_parts = {"records": [encoded, 0.5], "n": whole["n"], "inner": {"p": encoded}}
        assert canonicalize(with_parts) == canonicalize(whole) == canonicalize_slow(with_parts)
    assert Encoded.of({"b": 1, "a": [1.0]}) == Encoded('{"a":[1],"b":1}') and not _plain(Encoded("1"))


def test_the_fast_path_refuses_what_the_reference_refuses() -> None:
    for bad in ({"k": "\ud800"}, ["x\udfff"], {"\ud800": 1}):
        with pytest.raises(ValueError):
            canonicalize(bad)
    assert not _plain({"\U0001F600": 1}) and not _plain([1.5]) and not _plain(SAFE_INT_MAX + 1)
