"""Decoded forms worth a second look, found cheaply: URL-encoding and base64 of a known prefix.

A secret can arrive encoded: a Kubernetes Secret's ``data:`` holds base64, a redirect URL holds
a percent-encoded DSN. Decoding every base64-looking run would be slow and noisy (images,
digests, public keys), so a run is decoded only when it contains the base64 form of a prefix
that marks a secret (``-----BEGIN``, ``AKIA``, ``ghp_``, ``password``…) at any of the three byte
alignments. The decoded text is screened again, one level deep.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from collections.abc import Iterator

_PREFIXES = (
    b"-----BEGIN", b"AKIA", b"ASIA", b"ghp_", b"gho_", b"ghs_", b"ghu_", b"github_pat_", b"glpat-", b"xoxb-",
    b"xoxp-", b"sk_live_", b"rk_live_", b"whsec_", b"sk-ant-", b"AIza", b"npm_", b"pypi-", b"shpat_", b"SG.",
    b"password", b"Password", b"PASSWORD", b"secret", b"SECRET", b"token", b"TOKEN", b"aws_", b"AWS_",
    b"api_key", b"apiKey", b"API_KEY", b"postgres://", b"postgresql://", b"mysql://", b"mongodb", b"redis://",
    b"amqp://", b"https://", b"http://", b"Bearer ", b"eyJ", b"PuTTY",
)
_MIN_FRAGMENT = 4


def _fragments(prefix: bytes) -> Iterator[str]:
    """The base64 characters that depend on ``prefix`` alone, for each of the three alignments."""
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + prefix + b"\0\0").decode()
        first = -(-8 * pad // 6)
        last = (8 * (pad + len(prefix))) // 6  # exclusive
        fragment = encoded[first:last]
        if len(fragment) >= _MIN_FRAGMENT:
            yield fragment
            yield fragment.replace("+", "-").replace("/", "_")


_FRAGMENTS = re.compile("|".join(sorted({re.escape(f) for p in _PREFIXES for f in _fragments(p)}, key=len, reverse=True)))
_RUN = re.compile(r"[A-Za-z0-9+/_-]{12,}={0,2}")


def _b64decode(run: str) -> str | None:
    body = run.rstrip("=")
    body += "=" * (-len(body) % 4)
    for altchars in (None, b"-_"):
        try:
            raw = base64.b64decode(body, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def decoded_forms(text: str, max_runs: int = 64) -> Iterator[str]:
    """Each decoded form of ``text`` worth screening again (at most ``max_runs`` base64 runs)."""
    if "%" in text:
        unquoted = urllib.parse.unquote(text)
        if unquoted != text:
            yield unquoted
    runs = 0
    for match in _RUN.finditer(text):
        run = match.group()
        # A run that is one piece of a bigger base64 blob with the prefix somewhere inside:
        # decode from the fragment's start, aligned to a 4-character boundary.
        hit = _FRAGMENTS.search(run)
        if hit is None:
            continue
        runs += 1
        if runs > max_runs:
            return
        for start in {0, hit.start() - hit.start() % 4}:
            decoded = _b64decode(run[start:])
            if decoded:
                yield decoded
                break
