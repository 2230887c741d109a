"""Never-store screening (SPEC §10.1, seed §4): secrets, credentials, tokens, API and signing
keys, passwords, connection strings, .env values, session cookies, and the host's own binding
data anywhere in the payload or evidence → the candidate is rejected.

Detectors are deliberately conservative pattern rules; each has a constant name that becomes the
decision's reason (never the matched text). A labelled corpus with precision/recall figures is a
later issue.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_DETECTORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private_key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("github_token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}\b")),
    ("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("api_key_prefixed", re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bsk-[A-Za-z0-9_-]{20,}\b")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    # Compact JWS/JWT, which includes the host's own context and confirmation tokens.
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer_token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{20,}")),
    ("connection_string", re.compile(r"(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]+:[^\s@/]+@[^\s/]+")),
    (
        "credential_assignment",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|"
            r"client[_-]?secret|private[_-]?key)\b\s*[:=]\s*[\"']?[^\s\"']{6,}"
        ),
    ),
    (
        "dotenv_secret",
        re.compile(r"(?m)(?:^|\s)(?:export\s+)?[A-Z][A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY)[A-Z0-9_]*=\S+"),
    ),
    ("session_cookie", re.compile(r"(?i)\b(?:set-cookie:|cookie:)\s*[^\s=]+=[^\s;]{8,}|\b(?:sessionid|session_id|phpsessid|jsessionid|connect\.sid)=[^\s;]{8,}")),
    ("engram_binding", re.compile(r"engram-(?:context|confirmation)\+jwt|io\.engram/(?:context|confirmation)")),
)

DETECTOR_NAMES: tuple[str, ...] = tuple(name for name, _ in _DETECTORS)


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def find_secret(*values: Any) -> str | None:
    """The name of the first detector that fires on any string inside ``values``, else None."""
    for value in values:
        for text in _strings(value):
            for name, pattern in _DETECTORS:
                if pattern.search(text):
                    return name
    return None
