"""The maintained detector: detect-secrets (Yelp, Apache-2.0) plugins run in-process.

We use the plugins' pattern matchers only: no files, no baseline, no network verification
(``analyze_string`` never calls ``verify``). Left out, because on the labelled corpus they fire
on what agents legitimately capture and add nothing our rules and the rest miss: the entropy
plugins (digests, lockfile integrity, base64 images, commit ids) and the public-IP plugin.
The keyword plugin runs with its config-file patterns (``key: value`` / ``key = value``) on the
lines that hold one of its keywords, and its hits pass the library's own false-positive
heuristics plus our placeholder check; the provider-format plugins read every line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.filters import heuristic
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins import keyword
from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP, KeywordDetector

from admission_worker.screening.rules import plausible

_EXCLUDED = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"})


# Lowercase substrings of which every hit of these plugins contains one (read off their
# patterns in detect-secrets 1.5.0; tests/admission/test_decide.py keeps a positive case of
# each): a text holding none skips the plugin. They are the slowest plugins on prose, since
# their keywords are optional inside the pattern and the regex engine cannot skip ahead.
_GATES: dict[str, tuple[str, ...]] = {
    "CloudantDetector": ("cloudant.com", "key", "pw", "pass", "token"),
    "IbmCloudIamDetector": ("key", "pwd", "pass", "token"),
    "IbmCosHmacDetector": ("secret",),
    "SoftlayerDetector": ("key", "pwd", "pass", "token", "softlayer"),
    "ArtifactoryDetector": ("akc", "ap"),
}


@dataclass(frozen=True)
class LibraryDetector:
    name: str  # constant: "ds." + the plugin's class name
    scan: Callable[[str], Iterator[tuple[str, str]]]  # (secret, the line it is on)
    # The keyword plugin's values are screened by the heuristics; provider formats are not.
    filtered: bool
    gate: tuple[str, ...] = ()


_KEYWORD_LINE = re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)
# Substrings every keyword of the plugin's list contains: a text without any skips it at once.
_KEYWORD_STEMS = ("key", "pass", "pwd", "secret", "contras")


# The plugins are written for lines of source code, and some of their patterns are quadratic
# in the length of a line (measured: a 64 KiB line of repeated "sk-" took 12 s in one plugin).
# The provider-format plugins read the text in overlapping windows (the keyword plugin reads
# lines, long ones windowed too): linear in the text, and any secret up to _OVERLAP characters
# long lies whole inside one window.
_WINDOW = 2048
_OVERLAP = 512


def _windows(text: str) -> Iterator[str]:
    if len(text) <= _WINDOW:
        yield text
        return
    for start in range(0, len(text) - _OVERLAP, _WINDOW - _OVERLAP):
        yield text[start:start + _WINDOW]


def _lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        yield from _windows(line)


def _keyword_scanner(plugin: KeywordDetector) -> Callable[[str], Iterator[tuple[str, str]]]:
    def scan(text: str) -> Iterator[tuple[str, str]]:
        if not any(stem in text.lower() for stem in _KEYWORD_STEMS):
            return
        for line in _lines(text):
            if _KEYWORD_LINE.search(line):
                for secret in plugin.analyze_string(line, denylist_regex_to_group=CONFIG_DENYLIST_REGEX_TO_GROUP):
                    yield secret, line
    return scan


def _pattern_scanner(plugin: BasePlugin) -> Callable[[str], Iterator[tuple[str, str]]]:
    def scan(text: str) -> Iterator[tuple[str, str]]:
        for window in _windows(text):
            for secret in plugin.analyze_string(window):
                yield secret, window
    return scan


def _scanner(plugin: BasePlugin) -> Callable[[str], Iterator[tuple[str, str]]]:
    return _keyword_scanner(plugin) if isinstance(plugin, KeywordDetector) else _pattern_scanner(plugin)


def _load() -> tuple[LibraryDetector, ...]:
    detectors = []
    for cls in sorted(get_mapping_from_secret_type_to_class().values(), key=lambda c: c.__name__):
        if cls.__name__ in _EXCLUDED:
            continue
        plugin = cls()
        detectors.append(LibraryDetector(f"ds.{cls.__name__}", _scanner(plugin), isinstance(plugin, KeywordDetector),
                                         _GATES.get(cls.__name__, ())))
    return tuple(detectors)


DETECTORS: tuple[LibraryDetector, ...] = _load()
LIBRARY_NAMES: tuple[str, ...] = tuple(d.name for d in DETECTORS)


def _false_positive(secret: str, line: str) -> bool:
    return (heuristic.is_templated_secret(secret) or heuristic.is_prefixed_with_dollar_sign(secret)
            or heuristic.is_indirect_reference(line) or heuristic.is_sequential_string(secret)
            or heuristic.is_potential_uuid(secret) or heuristic.is_likely_id_string(secret, line)
            or not plausible(secret.strip("\"'"), "mixed"))


_TOKEN = re.compile(r"""[^\s"'<>,;=:()\[\]{}`]+""")


def _token_around(secret: str, line: str) -> str:
    """The whole token a hit lies in: some plugins return only a captured prefix ("ghp")."""
    for token in _TOKEN.finditer(line):
        if secret in token.group():
            return token.group()
    return secret


def match_library(text: str) -> str | None:
    """The name of the first plugin with a hit in ``text`` that survives the filters, else None."""
    lowered = text.lower()
    for detector in DETECTORS:
        if detector.gate and not any(word in lowered for word in detector.gate):
            continue
        for secret, line in detector.scan(text):
            if not secret:
                continue
            if detector.filtered and _false_positive(secret, line):
                continue
            if not detector.filtered and not plausible(_token_around(secret, line), "any"):
                continue
            return detector.name
    return None
