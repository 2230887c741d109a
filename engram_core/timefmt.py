"""Instants (``YYYY-MM-DDTHH:mm:ss.sssZ``, UTC, millisecond precision) and epoch values."""

from __future__ import annotations

import calendar
import re
import time
from datetime import datetime, timezone

SAFE_INT_MAX = 2**53 - 1
_INSTANT_RE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.([0-9]{3})Z\Z")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def format_instant(ms: int) -> str:
    seconds = ms // 1000
    millis = ms - seconds * 1000
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


def parse_instant(text: str) -> int:
    """Epoch ms of a strict, calendar-valid instant; ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("instant must be a string")
    match = _INSTANT_RE.match(text)
    if match is None:
        raise ValueError("not an instant")
    year, month, day, hour, minute, second, millis = (int(g) for g in match.groups())
    if not 1 <= month <= 12 or not 1 <= day <= calendar.monthrange(year, month)[1]:
        raise ValueError("not a calendar date")
    if hour > 23 or minute > 59 or second > 59 or year < 1:
        raise ValueError("not a valid time")
    return calendar.timegm((year, month, day, hour, minute, second)) * 1000 + millis


def is_instant(text: object) -> bool:
    try:
        parse_instant(text)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def is_safe_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -SAFE_INT_MAX <= value <= SAFE_INT_MAX
