"""A search packet's canonical JSON, written around its score and rank.

A packet is a record's redacted part (:func:`engram_core.redaction.project`: the record, its
redacted fields and the redaction receipt's digest) plus the hit's ``score`` and ``rank``. The
part is the same on every page that shows the record by the same allowlist; only the two
numbers change. :class:`PacketPart` serialises the packet once with a marker in place of each
number and keeps the text around them, so a page writes a packet by joining five strings: the
same bytes :func:`engram_core.canonical.canonicalize` writes for the whole packet (key order
included), proven in tests/search/test_redaction.py.
"""

from __future__ import annotations

from typing import Any

from engram_core.canonical import Encoded, canonicalize, format_number

# Markers: a control character never appears unescaped in canonical JSON, so each one's
# position in the text is exactly where its value goes.
_RANK, _SCORE = "\x00rank\x00", "\x00score\x00"
# The members of a part as ScopeProjection.packet_part makes it, in canonical order ("rank"
# sorts before "record", "redaction_receipt_digest" before "score").
_MEMBERS = ("record", "redacted_fields", "redaction_receipt_digest")


class PacketPart:
    """The canonical JSON of a packet of ``part`` with its score and rank left open."""

    __slots__ = ("_pieces",)

    def __init__(self, part: dict[str, Any]) -> None:
        """``part``: the redacted part (``record`` may already be :class:`Encoded`)."""
        if "score" in part or "rank" in part:
            raise ValueError("a packet part holds neither score nor rank")
        record = part.get("record")
        if len(part) == len(_MEMBERS) and isinstance(record, Encoded) and all(name in part for name in _MEMBERS):
            # A projection's part (its record already canonical): written member by member,
            # the bytes canonicalize() writes for the whole, without its walk of the part.
            text = "".join(('{"rank":', _RANK, ',"record":', record.text, ',"redacted_fields":',
                            canonicalize(part["redacted_fields"]).decode("utf-8"), ',"redaction_receipt_digest":',
                            canonicalize(part["redaction_receipt_digest"]).decode("utf-8"), ',"score":', _SCORE, "}"))
        else:
            text = canonicalize({**part, "score": Encoded(_SCORE), "rank": Encoded(_RANK)}).decode("utf-8")
        # "rank" sorts before "score": the text is head, rank, middle, score, tail.
        head, rank, rest = text.partition(_RANK)
        middle, score, tail = rest.partition(_SCORE)
        if not (rank and score) or _SCORE in head or _RANK in middle + tail or _SCORE in tail:
            raise ValueError("a packet part must not hold the markers")
        self._pieces = (head, middle, tail)

    def fill(self, score: float, rank: int) -> Encoded:
        """The packet with this score and rank, as canonical JSON."""
        if type(rank) is not int:
            raise TypeError("rank must be an int")
        head, middle, tail = self._pieces
        return Encoded(head + format_number(rank) + middle + format_number(float(score)) + tail)

    def __len__(self) -> int:
        """Characters held (the part's JSON, without the two numbers)."""
        return sum(len(piece) for piece in self._pieces)
