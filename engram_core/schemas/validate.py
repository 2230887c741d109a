"""Exact validation of tool arguments against the published schemas (SPEC §1.1, §3, §5).

``validate_arguments(tool, arguments, now_ms=...)`` returns ``arguments`` unchanged (the very
object; defaults are never injected into what was sent, because the operation digest covers the
arguments as sent) or raises :class:`EngramError` with ``INVALID_SCHEMA`` or ``INVALID_DIGEST``.
An unknown tool name raises :class:`KeyError` (the gateway maps it to ``-32602``).

Order of checks:

1. A guard walk over the raw value, iterative and bounded, before anything else touches it:
   only JSON types (``dict`` with ``str`` keys, ``list``, ``str``, ``int``, ``bool``); no
   ``null``; no floats at all (every number in every schema is an integer, and ``10.0`` is not
   accepted as one); integers within ±(2^53−1); strings encodable as UTF-8 (no lone
   surrogates) and in NFC; no host-bound name as a key at any level; nesting no deeper than any
   schema allows; a running lower bound of the serialised size that stops the walk as soon as
   it passes 1,048,576 bytes. Any failure here is ``INVALID_SCHEMA``.
2. The exact serialised size: ``len(canonicalize(arguments)) <= 1,048,576``.
3. The structural schema (jsonschema Draft 2020-12, compiled once) extended with the custom
   keywords ``x-engram-minBytes`` / ``x-engram-maxBytes`` (UTF-8 bytes), ``x-engram-instant``
   (strict, calendar-valid instant) and ``x-engram-strictlyAscending`` (code point order), and
   with ``pattern`` evaluated as a full match (Python's ``$`` would accept a trailing newline).
4. Cross-field rules (capture cross-references, ``t_end >= t``, ``expires_at > now_ms``), run
   only when the structure is otherwise sound.

Digest precedence: a malformed digest *string* in ``content_digest`` / ``evidence_digest`` is
``INVALID_DIGEST`` only if nothing else is wrong; any other violation makes it
``INVALID_SCHEMA``. A digest field of the wrong type (not a string) is ``INVALID_SCHEMA``.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from functools import lru_cache
from typing import Any, Iterator

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from engram_core.canonical import canonicalize
from engram_core.digests import is_digest
from engram_core.errors import Code, EngramError
from engram_core.schemas.tools import (
    DEFAULT_CAPABILITY_POLICY,
    DEFAULT_RETENTION,
    DIGEST_FIELDS,
    HOST_BOUND_NAMES,
    LIMIT_DEFAULT,
    MAX_ARGUMENTS_BYTES,
    PACKET_DEFAULT,
    SAFE_INT,
    TOOLS,
)
from engram_core.timefmt import parse_instant

__all__ = ["validate_arguments", "with_defaults", "MAX_DEPTH"]

# Deepest legitimate nesting: arguments > payload > citations > [i] > locator > value (5).
MAX_DEPTH = 8


class _Invalid(Exception):
    """Internal: a schema violation found by the guard walk."""


# ---------------------------------------------------------------------------------------------
# Custom keywords


@lru_cache(maxsize=256)
def _compile_pattern(pattern: str) -> tuple[re.Pattern[str], bool]:
    if len(pattern) >= 2 and pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$"):
        return re.compile("(?:" + pattern[1:-1] + ")"), True
    return re.compile(pattern), False


def _kw_pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    rx, anchored = _compile_pattern(pattern)
    ok = rx.fullmatch(instance) if anchored else rx.search(instance)
    if not ok:
        yield ValidationError(f"does not match {pattern!r}")


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8"))


def _kw_min_bytes(validator: Any, bound: int, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and _utf8_len(instance) < bound:
        yield ValidationError(f"shorter than {bound} UTF-8 bytes")


def _kw_max_bytes(validator: Any, bound: int, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and _utf8_len(instance) > bound:
        yield ValidationError(f"longer than {bound} UTF-8 bytes")


def _kw_instant(validator: Any, enabled: bool, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not enabled or not validator.is_type(instance, "string"):
        return
    try:
        parse_instant(instance)
    except Exception:
        yield ValidationError("not a calendar-valid instant")


def _kw_strictly_ascending(validator: Any, order: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "array"):
        return
    if order != "codepoint":  # pragma: no cover - schema authoring error
        yield ValidationError(f"unsupported order {order!r}")
        return
    for a, b in zip(instance, instance[1:]):
        if type(a) is str and type(b) is str and not a < b:
            yield ValidationError("items are not strictly ascending")
            return


_EngramValidator = extend(
    Draft202012Validator,
    {
        "pattern": _kw_pattern,
        "x-engram-minBytes": _kw_min_bytes,
        "x-engram-maxBytes": _kw_max_bytes,
        "x-engram-instant": _kw_instant,
        "x-engram-strictlyAscending": _kw_strictly_ascending,
    },
)

_VALIDATORS: dict[str, Any] = {}
for _name, _tool in TOOLS.items():
    Draft202012Validator.check_schema(_tool.input_schema)
    _VALIDATORS[_name] = _EngramValidator(_tool.input_schema)


# ---------------------------------------------------------------------------------------------
# Guard walk


def _guard(arguments: Any) -> None:
    """Raise _Invalid for anything that is not a small, well-formed JSON value (see module doc)."""
    if type(arguments) is not dict:
        raise _Invalid("arguments must be a JSON object")
    size = 0  # a lower bound of the canonical serialisation
    stack: list[tuple[Any, int]] = [(arguments, 0)]
    while stack:
        value, depth = stack.pop()
        t = type(value)
        if t is str:
            if len(value) > MAX_ARGUMENTS_BYTES:
                raise _Invalid("too large")
            _check_string(value)
            size += len(value.encode("utf-8")) + 2
        elif t is bool:
            size += 4
        elif t is int:
            if value > SAFE_INT or value < -SAFE_INT:
                raise _Invalid("integer outside the safe range")
            size += 1
        elif t is dict:
            if depth >= MAX_DEPTH:
                raise _Invalid("too deep")
            size += 2 + max(0, len(value) - 1)
            if size > MAX_ARGUMENTS_BYTES:
                raise _Invalid("too large")
            for key, item in value.items():
                if type(key) is not str:
                    raise _Invalid("non-string key")
                if key in HOST_BOUND_NAMES:
                    raise _Invalid("host-bound name in arguments")
                if len(key) > MAX_ARGUMENTS_BYTES:
                    raise _Invalid("too large")
                _check_string(key)
                size += len(key.encode("utf-8")) + 3
                if size > MAX_ARGUMENTS_BYTES:
                    raise _Invalid("too large")
                stack.append((item, depth + 1))
        elif t is list:
            if depth >= MAX_DEPTH:
                raise _Invalid("too deep")
            size += 2 + max(0, len(value) - 1)
            if size > MAX_ARGUMENTS_BYTES:
                raise _Invalid("too large")
            stack.extend((item, depth + 1) for item in value)
        else:
            # None (null), float (including 10.0, NaN, inf), and every non-JSON type.
            raise _Invalid("not an accepted JSON type")
        if size > MAX_ARGUMENTS_BYTES:
            raise _Invalid("too large")


def _check_string(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise _Invalid("not encodable as UTF-8") from None
    if not unicodedata.is_normalized("NFC", s):
        raise _Invalid("not NFC")


# ---------------------------------------------------------------------------------------------
# Cross-field rules


def _capture_rules(args: dict[str, Any], now_ms: int) -> bool:
    """True when every capture cross-field rule holds (structure already validated)."""
    payload = args["payload"]
    evidence = args["evidence"]
    components = payload["components"]
    citations = payload["citations"]

    component_ids = [c["component_id"] for c in components]
    if len(set(component_ids)) != len(component_ids):
        return False
    citation_ids = [c["citation_id"] for c in citations]
    known = set(citation_ids)
    if len(known) != len(citation_ids):
        return False
    for component in components:
        if not known.issuperset(component["citation_ids"]):
            return False
    by_id = {c["component_id"]: c for c in components}
    primary = by_id.get(payload["primary_component_id"])
    if primary is None:
        return False
    event_citation = payload["primary_event"]["citation_id"]
    if event_citation not in known or event_citation not in primary["citation_ids"]:
        return False
    if not known.issuperset(evidence["citation_ids"]):
        return False

    valid_time = payload["valid_time"]
    if "t_end" in valid_time and valid_time["t_end"] < valid_time["t"]:
        return False

    retention = payload.get("retention")
    if retention is not None and "expires_at" in retention:
        if parse_instant(retention["expires_at"]) <= now_ms:
            return False
    return True


def _digests_ok(args: dict[str, Any]) -> bool:
    ok = is_digest(args["evidence"]["evidence_digest"])
    for citation in args["payload"]["citations"]:
        ok = ok and is_digest(citation["content_digest"])
    return ok


# ---------------------------------------------------------------------------------------------
# Public API


def validate_arguments(tool: str, arguments: object, *, now_ms: int) -> dict:
    """Validate ``arguments`` for ``tool`` exactly; return them unchanged or raise EngramError.

    Raises KeyError for an unknown tool name.
    """
    validator = _VALIDATORS[tool]  # KeyError for an unknown tool, on purpose
    if type(now_ms) is not int:
        raise TypeError("now_ms must be an int (epoch milliseconds)")
    try:
        verdict = _verdict(tool, validator, arguments, now_ms)
    except _Invalid:
        verdict = Code.INVALID_SCHEMA
    except Exception:  # never crash on hostile input
        verdict = Code.INVALID_SCHEMA
    if verdict is not None:
        raise EngramError(verdict)
    return arguments  # type: ignore[return-value]


def _verdict(tool: str, validator: Any, arguments: Any, now_ms: int) -> Code | None:
    _guard(arguments)
    if len(canonicalize(arguments)) > MAX_ARGUMENTS_BYTES:
        return Code.INVALID_SCHEMA
    digest_bad = False
    for error in validator.iter_errors(arguments):
        path = error.absolute_path
        if error.validator == "pattern" and path and path[-1] in DIGEST_FIELDS:
            digest_bad = True
            continue
        return Code.INVALID_SCHEMA
    if tool == "engram_memory_capture":
        if not _capture_rules(arguments, now_ms):
            return Code.INVALID_SCHEMA
        if not _digests_ok(arguments):
            digest_bad = True
    return Code.INVALID_DIGEST if digest_bad else None


def with_defaults(tool: str, args: dict) -> dict:
    """A deep copy of validated ``args`` with the documented defaults filled in.

    search: limit 10, max_packet_bytes 65536, capability_policy lexical/forbid;
    get: max_packet_bytes 65536; capture: payload.retention {derivative_rule: make-ineligible}
    when retention is omitted (the effective payload of SPEC §5). Other tools: a plain copy.
    Never use the result for the operation digest: that covers the arguments as sent.
    """
    if tool not in TOOLS:
        raise KeyError(tool)
    out = copy.deepcopy(args)
    if tool == "engram_memory_search":
        out.setdefault("limit", LIMIT_DEFAULT)
        out.setdefault("max_packet_bytes", PACKET_DEFAULT)
        out.setdefault("capability_policy", dict(DEFAULT_CAPABILITY_POLICY))
    elif tool == "engram_memory_get":
        out.setdefault("max_packet_bytes", PACKET_DEFAULT)
    elif tool == "engram_memory_capture":
        payload = out.get("payload")
        if isinstance(payload, dict):
            payload.setdefault("retention", dict(DEFAULT_RETENTION))
    return out
