"""The tool result envelope (SPEC §4): ``structuredContent``, and its identical JSON text copy."""

from __future__ import annotations

import json
from typing import Any

from engram_core.errors import EngramError


class ParsedValue(dict[str, Any]):
    """A JSON object value parsed from ``text``, which it keeps: the text copy of its envelope
    is written around that text instead of serialising the parsed value again (a search page
    is ~25 KB). Built by :meth:`parse` and not changed afterwards (the two would differ)."""

    __slots__ = ("text",)

    text: str

    @classmethod
    def parse(cls, data: bytes | str) -> "ParsedValue":
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise ValueError("a value must be a JSON object")
        value = cls(parsed)
        value.text = text
        return value


def success(value: object, audit_id: str) -> dict[str, Any]:
    return {"ok": True, "output": {"schema_version": 1, "value": value}, "auditId": audit_id, "redactionClass": "high"}


def failure(error: EngramError, audit_id: str) -> dict[str, Any]:
    return {"ok": False, "auditId": audit_id, "redactionClass": "high", "error": error.to_json()}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def text_copy(result: dict[str, Any]) -> str:
    """The envelope's JSON text (the same JSON value as ``result``). A success around a
    :class:`ParsedValue` is written around the value's own text."""
    output = result.get("output")
    if (result.get("ok") is True and list(result) == ["ok", "output", "auditId", "redactionClass"]
            and isinstance(output, dict) and list(output) == ["schema_version", "value"]
            and type(output["value"]) is ParsedValue):
        return "".join(('{"ok":true,"output":{"schema_version":', _dumps(output["schema_version"]), ',"value":',
                        output["value"].text, '},"auditId":', _dumps(result["auditId"]), ',"redactionClass":',
                        _dumps(result["redactionClass"]), "}"))
    return _dumps(result)
