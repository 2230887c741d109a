"""``engram``: one console script for every process and operator task.

    engram up                       the whole stack on loopback (datastores included)
    engram gateway [--stdio]        the MCP gateway
    engram storage|search|admission|worker|beat
    engram admin enable|disable|show|policy|transition|pending|adjudicate|history|verify-journal|
                                    rebuild-projection …
    engram host keygen [--out FILE]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

# gRPC's C core logs to stderr in its own format, at info level by default (e.g. each failed TLS
# handshake): errors only, and it must be set before grpc loads.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def _service(name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        if name == "gateway":
            from gateway.server import main as gateway_main

            return gateway_main(argv)
        if argv:
            print(f"engram {name}: takes no arguments (settings come from ENGRAM_* variables)", file=sys.stderr)
            return 2
        if name == "storage":
            from storage_service.server import main as service_main
        elif name == "search":
            from search_service.server import main as service_main
        elif name == "admission":
            from admission_worker.server import main as service_main
        elif name == "beat":
            from admission_worker.beat import main as service_main
        else:
            from admission_worker.worker import main as service_main
        return int(service_main() or 0)

    return run


def _up(argv: list[str]) -> int:
    from engram_cli.up import main as up_main

    return up_main(argv)


def _admin(argv: list[str]) -> int:
    from engram_cli.admin import main as admin_main

    return admin_main(argv)


def _host(argv: list[str]) -> int:
    if not argv or argv[0] != "keygen":
        print("usage: engram host keygen [--out FILE]", file=sys.stderr)
        return 2
    from engram_hostkit.keys import keygen_main

    return keygen_main(argv[1:])


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "up": _up,
    "gateway": _service("gateway"),
    "storage": _service("storage"),
    "search": _service("search"),
    "admission": _service("admission"),
    "worker": _service("worker"),
    "beat": _service("beat"),
    "admin": _admin,
    "host": _host,
}


CONFIG_EXIT = 78  # EX_CONFIG


def settings_problems(exc: Any) -> list[str]:
    """One line per invalid ``ENGRAM_*`` setting: the variable and what is wrong with it —
    never its value (pydantic's own text quotes the input, which may be a secret)."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        name = "ENGRAM_" + "_".join(str(part) for part in error["loc"]).upper()
        what = "required, not set" if error["type"] == "missing" else error["msg"]
        lines.append(f"  {name}: {what}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    from pydantic import ValidationError

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[args[0]](args[1:])
    except ValidationError as exc:
        print(f"engram {args[0]}: invalid configuration:", *settings_problems(exc),
              "Set these environment variables (README, Configuration) and start it again.",
              sep="\n", file=sys.stderr)
        return CONFIG_EXIT


if __name__ == "__main__":
    sys.exit(main())
