"""Structured JSON logs on stderr. Callers log ids and digests, never content, keys or tokens."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from types import TracebackType


def _entry(created: float, level: str, service: str, logger: str, msg: str) -> dict[str, object]:
    return {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created * 1000) % 1000:03d}Z",
        "level": level,
        "service": service,
        "logger": logger,
        "msg": msg,
    }


def line(service: str, logger: str, msg: str, level: str = "info") -> bytes:
    """One log line in the same shape, built without the logging module's locks (for a signal
    handler that must write with ``os.write``)."""
    return (json.dumps(_entry(time.time(), level, service, logger, msg), ensure_ascii=False) + "\n").encode()


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry = _entry(record.created, record.levelname.lower(), self.service, record.name, record.getMessage())
        for key in ("request_id", "tool", "scope_digest", "task_id", "rpc", "dependency", "reason", "down_seconds", "failures"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("pymongo").setLevel(logging.WARNING)
    sys.excepthook = _uncaught
    threading.excepthook = _uncaught_in_thread


def _uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """An exception nothing caught ends the process as one JSON line, not a bare traceback."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    logging.getLogger("engram").critical("uncaught exception", exc_info=(kind, value, tb))


def _uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    logging.getLogger("engram").error("uncaught exception in a thread",
                                      exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
