"""The six MCP tool definitions and their exact argument validator (SPEC §1, §3, §4, §5)."""

from engram_core.schemas.tools import TOOL_NAMES, TOOLS, ToolDef

__all__ = ["TOOL_NAMES", "TOOLS", "ToolDef"]
