"""Packet budgeting for search pages (SPEC §5 engram_memory_search).

Sizes are exact: the canonical (RFC 8785) size of the output value with ``n`` packets is the
size of the skeleton with ``records: []`` plus the packets' own canonical sizes plus ``n - 1``
separating commas, because JCS serialises every member independently of its context.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engram_core.canonical import canonicalize
from engram_core.errors import Code, EngramError

CURSOR_FIELD = "next_page_cursor"
DIGEST_PLACEHOLDER = "sha256:" + "0" * 64
"""Stands in for ``response_digest`` while fitting: a real digest has exactly this length."""


def cursor_placeholder(max_length: int) -> str:
    """A stand-in for ``next_page_cursor``: as long as the longest cursor (no JSON escaping)."""
    return "x" * max_length


def canonical_size(value: object) -> int:
    return len(canonicalize(value))


@dataclass(frozen=True, slots=True)
class FitResult:
    """``included``: the packets of this page, in rank order. ``cut``: the budget stopped the
    page before ``limit`` packets although more hits exist. ``has_more``: hits remain after
    the page, so ``next_page_cursor`` must be set (continuing after the last included packet).
    """

    included: list[dict[str, object]]
    cut: bool
    has_more: bool


def fit_packets(
    skeleton: Mapping[str, object],
    packets: Sequence[dict[str, object]],
    max_bytes: int,
    limit: int,
    more_hits: bool,
) -> FitResult:
    """Choose the packets of one page.

    ``skeleton`` is the output value with ``records: []``, the final ``rank_receipt``,
    ``response_digest`` = :data:`DIGEST_PLACEHOLDER` and ``next_page_cursor`` =
    :func:`cursor_placeholder` (always include it; it is left out of the size when the page
    needs no cursor). ``packets`` are the next hits' packets in rank order (at most ``limit``
    are used); ``more_hits`` says whether hits exist after the packets given.

    Raises ``RESULT_TOO_LARGE`` when the skeleton the page needs cannot fit, and
    ``PROJECTION_OVERSIZED`` when not even the first packet fits beside it.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    if skeleton.get("records") != []:
        raise ValueError("the skeleton must have records: []")
    page = list(packets[:limit])
    more_after_page = more_hits or len(packets) > limit
    if not page and more_after_page:
        raise ValueError("no packets given although more hits exist")
    bare = {name: value for name, value in skeleton.items() if name != CURSOR_FIELD}
    bare_size = canonical_size(bare)
    if bare_size > max_bytes:
        raise EngramError(Code.RESULT_TOO_LARGE)
    if not page:
        return FitResult(included=[], cut=False, has_more=False)
    sizes = [canonical_size(packet) for packet in page]
    if not more_after_page:
        if bare_size + sum(sizes) + len(sizes) - 1 <= max_bytes:
            return FitResult(included=page, cut=False, has_more=False)
        if len(page) == 1:
            raise EngramError(Code.PROJECTION_OVERSIZED)
    if CURSOR_FIELD not in skeleton:
        raise ValueError("the skeleton lacks the next_page_cursor placeholder")
    used = canonical_size(skeleton)
    if used > max_bytes:
        raise EngramError(Code.RESULT_TOO_LARGE)
    count = 0
    for size in sizes:
        extra = size if count == 0 else size + 1
        if used + extra > max_bytes:
            break
        used += extra
        count += 1
    if count == 0:
        raise EngramError(Code.PROJECTION_OVERSIZED)
    return FitResult(included=page[:count], cut=count < len(page), has_more=True)
