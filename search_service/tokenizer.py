"""The search tokenizer of profile ``engram-hybrid/v2`` (SPEC §9): segmentation only; stop
words and stemming are the analyzer's (:mod:`search_service.analyzer`).

A token is a maximal run of characters that are Unicode letters (general category ``L*``:
Lu, Ll, Lt, Lm, Lo), Unicode decimal digits (``Nd``) or the underscore ``_``. Everything else
separates tokens: whitespace, punctuation (including other connector punctuation such as
``‿``), symbols, combining marks (``M*``), and the other number categories ``Nl``/``No``
(Roman numerals, superscripts, vulgar fractions, circled digits).

Each run is then lowercased with ``str.lower`` (full Unicode lowercase mapping; segmentation
happens before lowercasing, so ``"İstanbul"`` stays one token ``"i̇stanbul"``). Single-
character ASCII tokens are dropped (``"a"``, ``"7"``, ``"_"``); two-character ones are kept
(``"ml"``, ``"kg"``, ``"np"``); non-ASCII tokens are kept whatever their length (``"é"``).

Input text is NFC already (SPEC §3 checks it); the tokenizer does not normalise. The Unicode
database is Python's (``unicodedata.unidata_version``), recorded in the lexical profile config.
"""

from __future__ import annotations

import re
import unicodedata

# In Python's ``re`` a str-pattern ``\w`` is exactly: str.isalnum() or "_", i.e. L*, N* and "_".
# The token alphabet is narrower (no Nl/No), so runs containing such characters are split
# further; that is rare, so it is a slow path rather than an 80-range character class.
_WORD_RUN = re.compile(r"\w+")

TOKENIZER_DESCRIPTION = (
    "maximal runs of Unicode L*|Nd|'_' (Python unicodedata "
    + unicodedata.unidata_version
    + "); each run lowercased with full str.lower after segmentation; "
    "drop single-character ASCII tokens"
)


def _in_alphabet(char: str) -> bool:
    return char.isalpha() or char.isdecimal() or char == "_"


def _split_run(run: str) -> list[str]:
    parts: list[str] = []
    start = 0
    for i, char in enumerate(run):
        if not _in_alphabet(char):
            if i > start:
                parts.append(run[start:i])
            start = i + 1
    if start < len(run):
        parts.append(run[start:])
    return parts


def _keep(token: str) -> bool:
    return len(token) > 1 or not token.isascii()


def tokenize(text: str) -> list[str]:
    """Split ``text`` into search tokens, in order of appearance, duplicates kept."""
    tokens: list[str] = []
    for run in _WORD_RUN.findall(text):
        if run.isascii() or run.isalpha():
            pieces = (run,)
        else:
            pieces = _split_run(run)
        for piece in pieces:
            token = piece.lower()
            if _keep(token):
                tokens.append(token)
    return tokens
