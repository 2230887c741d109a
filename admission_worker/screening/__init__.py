"""Never-store screening (SPEC §10.1, seed §4): secrets, credentials, tokens, API and signing
keys, passwords, connection strings, .env values, session cookies, and the host's own binding
tokens anywhere in the payload or evidence → the candidate is rejected.

Every string at every depth (dict keys included) is screened by our rules (``rules.py``) and by
the detect-secrets plugins (``library.py``), then its cheap decoded forms
(``decode.py``) once more. The result names the detector (a constant), never the matched text.

Cost is bounded: a string longer than ``MAX_FIELD_BYTES`` (the largest string a valid capture
holds, SPEC §5) or a scan that outlives its time budget ends the screening as *incomplete*,
and an incomplete screening rejects (``screening_incomplete``): a candidate we could not read
in full is never admitted. ``tests/admission/test_screening_corpus.py`` measures recall and
false positives on a labelled corpus; ``bench/screening_bench.py`` measures the cost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from admission_worker.screening.decode import decoded_forms
from admission_worker.screening.library import LIBRARY_NAMES, match_library
from admission_worker.screening.rules import RULE_NAMES, match_rules

MAX_FIELD_BYTES = 65_536
DEFAULT_BUDGET_SECONDS = 5.0
INCOMPLETE = "screening_incomplete"
DETECTOR_NAMES: tuple[str, ...] = RULE_NAMES + LIBRARY_NAMES
_DECODE_DEPTH = 1


class _OutOfBudget(Exception):
    pass


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


class _Scan:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def text(self, text: str, depth: int = 0) -> str | None:
        if time.monotonic() > self.deadline:
            raise _OutOfBudget
        found = match_rules(text)
        if found is not None:
            return found
        found = match_library(text)
        if found is not None:
            return found
        if depth < _DECODE_DEPTH:
            for decoded in decoded_forms(text):
                found = self.text(decoded, depth + 1)
                if found is not None:
                    return found
        return None


def screen(*values: Any, budget_seconds: float = DEFAULT_BUDGET_SECONDS,
           max_field_bytes: int = MAX_FIELD_BYTES) -> str | None:
    """Screen every string inside ``values``: the name of the first detector that fires (one
    of DETECTOR_NAMES), INCOMPLETE when a bound stopped the screening, else None."""
    scan = _Scan(time.monotonic() + budget_seconds)
    try:
        for value in values:
            for text in _strings(value):
                if len(text) > max_field_bytes // 4 and len(text.encode("utf-8")) > max_field_bytes:
                    return INCOMPLETE
                found = scan.text(text)
                if found is not None:
                    return found
    except _OutOfBudget:
        return INCOMPLETE
    return None
