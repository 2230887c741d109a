"""The development host file: everything a local host needs to talk to a gateway.

``engram up`` writes one (mode 0600) after registering the host's public key with the
gateway; tests, examples and benchmarks load it to mint contexts and confirmations.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from engram_core.jws import private_key_from_b64url, public_key_to_b64url
from engram_hostkit.keys import write_secret_file


class HostFileError(ValueError):
    """The host file is missing, unreadable or malformed (the message names the problem)."""


@dataclass(frozen=True)
class HostFile:
    """One host's identity and target: ``host_id``, its key pair (raw base64url), the
    gateway's ``audience`` and ``mcp_url``, and the default ``tenant``/``workspace``."""

    host_id: str
    private_key: str
    public_key: str
    audience: str
    mcp_url: str
    tenant: str
    workspace: str

    @classmethod
    def from_dict(cls, data: Any) -> "HostFile":
        """Validate a decoded host file. Raises :class:`HostFileError`."""
        if not isinstance(data, dict):
            raise HostFileError("host file: top level must be a JSON object")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise HostFileError(f"host file: missing field(s) {', '.join(missing)}")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise HostFileError(f"host file: unknown field(s) {', '.join(unknown)}")
        for name in names:
            if not isinstance(data[name], str) or not data[name]:
                raise HostFileError(f"host file: {name} must be a non-empty string")
        try:
            derived = public_key_to_b64url(private_key_from_b64url(data["private_key"]).public_key())
        except ValueError:
            raise HostFileError("host file: private_key is not a raw Ed25519 key in base64url") from None
        if derived != data["public_key"]:
            raise HostFileError("host file: public_key does not belong to private_key")
        return cls(**{n: data[n] for n in names})

    @classmethod
    def load(cls, path: str) -> "HostFile":
        """Read and validate a host file. Raises :class:`HostFileError`."""
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except OSError as exc:
            raise HostFileError(f"host file {path}: cannot read ({exc.strerror})") from None
        except ValueError:
            raise HostFileError(f"host file {path}: not valid JSON") from None
        return cls.from_dict(data)

    def save(self, path: str) -> None:
        """Write the host file atomically with mode 0600 (overwrites)."""
        HostFile.from_dict(asdict(self))
        write_secret_file(path, json.dumps(asdict(self), indent=2) + "\n", overwrite=True)
