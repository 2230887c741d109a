"""RFC 8785 JSON Canonicalization Scheme (JCS).

Keys are sorted by UTF-16 code units, strings are escaped as ECMAScript's JSON.stringify does,
numbers use the ECMAScript Number::toString form. Python ints are accepted only within the
safe range ±(2^53 − 1): the contract allows no other integers, and larger ones would not
survive an IEEE-754 round trip.
"""

from __future__ import annotations

import json
import math

SAFE_INT_MAX = 2**53 - 1

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(value: str, out: list[str]) -> None:
    out.append('"')
    for ch in value:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("lone surrogate in string")
        else:
            out.append(ch)
    out.append('"')


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def format_number(value: float | int) -> str:
    """ECMAScript Number::toString of a finite double (ints are converted first)."""
    if isinstance(value, int):
        if abs(value) > SAFE_INT_MAX:
            raise ValueError("integer outside the safe range")
        return str(value)
    if not math.isfinite(value):
        raise ValueError("NaN and Infinity are not JSON")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits, exponent = _shortest(abs(value))
    k = len(digits)
    n = exponent + k  # the decimal point position: value = 0.digits × 10^n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    e = n - 1
    exp = f"e+{e}" if e >= 0 else f"e-{-e}"
    if k == 1:
        return sign + digits + exp
    return sign + digits[0] + "." + digits[1:] + exp


def _shortest(value: float) -> tuple[str, int]:
    """The shortest round-trip digit string and exponent: value = int(digits) × 10^exponent."""
    text = repr(value)
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    if frac == "0":
        frac = ""
    digits = (whole + frac).lstrip("0")
    exponent -= len(frac)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    return stripped or "0", exponent


class Encoded:
    """A value whose canonical JSON is already known (``text``, as :func:`canonicalize` wrote
    it, decoded): written verbatim wherever it appears, so a part serialised once (a search
    packet) is never walked again when the whole is serialised or measured."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    @classmethod
    def of(cls, value: object, *, plain: bool = False) -> "Encoded":
        """``plain``: the caller knows ``value`` is in the fast path's domain (no floats, no
        key outside the BMP, safe ints: e.g. it tested the whole it was cut from), so the
        C encoder writes it without the test's walk."""
        if plain:
            return cls(_FAST.encode(value))
        return cls(canonicalize(value).decode("utf-8"))

    def __len__(self) -> int:
        """Its canonical size in bytes."""
        return len(self.text.encode("utf-8"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Encoded) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Encoded({self.text!r})"


def _encode(value: object, out: list[str], depth: int, mixed: bool = False) -> None:
    """The reference encoder. ``mixed``: hand every plain subtree and string (no floats: see
    ``_FAST``) to the C encoder, so a search page's few scores do not send its records down
    this walk."""
    if depth > 1000:
        raise ValueError("nesting too deep")
    if isinstance(value, Encoded):
        out.append(value.text)
    elif mixed and (isinstance(value, str) or (isinstance(value, (dict, list, tuple)) and _plain(value))):
        out.append(_FAST.encode(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        _string(value, out)
    elif isinstance(value, (int, float)):
        out.append(format_number(value))
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError("object keys must be strings")
        out.append("{")
        for i, key in enumerate(sorted(value, key=_utf16_key)):
            if i:
                out.append(",")
            if mixed:  # escaping alike (the order is UTF-16's either way)
                out.append(_FAST.encode(key))
            else:
                _string(key, out)
            out.append(":")
            _encode(value[key], out, depth + 1, mixed)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out, depth + 1, mixed)
        out.append("]")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


# The fast path: for values without floats whose object keys hold no character outside the
# BMP, JCS output is exactly what the C JSON encoder writes with sorted keys and no spaces:
# code-point order equals UTF-16 order there, ints print alike, and both escape only '"', '\\'
# and the controls (the short forms, else lowercase \u00xx). Proven against the slow path on
# the RFC 8785 vectors and a random corpus (tests/core/test_canonical.py).
_FAST = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False,
                         check_circular=False)
_BMP_END = "\U00010000"


def is_plain(value: object) -> bool:
    """Whether the C encoder writes ``value``'s canonical JSON as is (no floats, no object key
    outside the BMP, ints in the safe range): then so it does for every part of it."""
    return _plain(value)


def _plain(value: object, depth: int = 0) -> bool:
    """True when ``value`` is in the fast path's domain (see ``_FAST``)."""
    if value is None or value is True or value is False or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -SAFE_INT_MAX <= value <= SAFE_INT_MAX
    if depth > 64:
        return False
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or (not key.isascii() and max(key) >= _BMP_END):
                return False
            if not _plain(item, depth + 1):
                return False
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(item, depth + 1) for item in value)
    return False


def canonicalize_slow(value: object) -> bytes:
    """The reference encoder (every value; what the fast path is tested against)."""
    out: list[str] = []
    _encode(value, out, 0)
    return "".join(out).encode("utf-8")


def canonicalize(value: object) -> bytes:
    """The UTF-8 bytes of the JCS form of ``value``."""
    try:
        if _plain(value):
            return _FAST.encode(value).encode("utf-8")
        out: list[str] = []
        _encode(value, out, 0, mixed=True)
        return "".join(out).encode("utf-8")
    except ValueError:  # a lone surrogate, NaN, …: the reference encoder says so in its own words
        pass
    return canonicalize_slow(value)
