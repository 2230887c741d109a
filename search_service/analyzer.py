"""The analyzer of profile ``engram-hybrid/v2`` (SPEC §9): per-scope language.

Text is segmented by :func:`search_service.tokenizer.tokenize` (NFC input; runs of letters,
digits and ``_``; lowercased; single-character ASCII tokens dropped), then the language's stop
list is removed. That is the *exact* copy; the *stemmed* copy is the same tokens through the
language's Snowball stemmer (PyStemmer, the C build of the Snowball algorithms). Language
``none`` has no stop list and no stemmed copy.

- ``en``: Lucene's 33-word English stop list, Snowball ``english`` (Porter2).
- ``de``: the Snowball German stop list (231 words), Snowball ``german``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

import Stemmer

from engram_core.languages import DEFAULT_SEARCH_LANGUAGE as DEFAULT_LANGUAGE
from engram_core.languages import SEARCH_LANGUAGES as LANGUAGES
from search_service.tokenizer import TOKENIZER_DESCRIPTION, tokenize

_SNOWBALL = {"en": "english", "de": "german"}


def _stop_list(language: str) -> frozenset[str]:
    if language == "none":
        return frozenset()
    text = resources.files("search_service").joinpath("stoplists", f"{language}.txt").read_text("utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


class Analyzer:
    """Exact and stemmed token streams for one language. Thread-safe for reading once built
    (PyStemmer's stemmer keeps a cache; calls hold the GIL)."""

    def __init__(self, language: str) -> None:
        if language not in LANGUAGES:
            raise ValueError("unknown search language")
        self.language = language
        self.stop_words = _stop_list(language)
        self._stemmer = Stemmer.Stemmer(_SNOWBALL[language]) if language in _SNOWBALL else None

    @property
    def stems(self) -> bool:
        """Whether this language has a stemmed copy."""
        return self._stemmer is not None

    def exact(self, text: str) -> list[str]:
        """The exact copy: tokens in order, duplicates kept, stop words removed."""
        stop = self.stop_words
        return [token for token in tokenize(text) if token not in stop]

    def stemmed(self, exact_tokens: list[str]) -> list[str]:
        """The stemmed copy of already-analysed exact tokens (empty for ``none``)."""
        if self._stemmer is None:
            return []
        return self._stemmer.stemWords(exact_tokens)

    def config(self) -> Mapping[str, object]:
        """The analyzer's part of the profile config (hashed into every rank receipt)."""
        return {
            "language": self.language,
            "tokenizer": TOKENIZER_DESCRIPTION,
            "normalisation": "input is NFC (SPEC §3); lowercase after segmentation",
            "stop_list": {"en": "Lucene EnglishAnalyzer (33 words)", "de": "Snowball German stop.txt (231 words)",
                          "none": "none"}[self.language],
            "stop_words": len(self.stop_words),
            "stemmer": (f"Snowball {_SNOWBALL[self.language]} (PyStemmer {Stemmer.version()})"
                        if self.language in _SNOWBALL else "none"),
        }


@cache
def analyzer_for(language: str) -> Analyzer:
    """The shared analyzer of ``language`` (ValueError for an unknown one)."""
    return Analyzer(language)
