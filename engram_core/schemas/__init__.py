"""The six MCP tool definitions and their exact argument validator (SPEC §1, §3, §4, §5).

``TOOLS`` / ``TOOL_NAMES`` / ``ToolDef`` come from :mod:`engram_core.schemas.tools` (no heavy
imports); ``validate_arguments`` / ``with_defaults`` from :mod:`engram_core.schemas.validate`,
loaded on first use so that importing the definitions stays cheap.
"""

from typing import Any

from engram_core.schemas.tools import TOOL_NAMES, TOOLS, ToolDef

__all__ = ["TOOL_NAMES", "TOOLS", "ToolDef", "validate_arguments", "with_defaults"]


def __getattr__(name: str) -> Any:
    if name in ("validate_arguments", "with_defaults"):
        from engram_core.schemas import validate

        return getattr(validate, name)
    raise AttributeError(name)
