"""RFC 8785 canonical JSON: the RFC's number and ordering examples, and refusals."""

from __future__ import annotations

import json
import math

import pytest

from engram_core.canonical import SAFE_INT_MAX, canonicalize, format_number

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
