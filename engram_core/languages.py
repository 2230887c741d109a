"""The search languages a scope can be set to (SPEC §9: analyzer per scope ``language``).
Shared by the operator policy (storage) and the analyzer (search)."""

from __future__ import annotations

SEARCH_LANGUAGES = ("en", "de", "none")
DEFAULT_SEARCH_LANGUAGE = "en"
