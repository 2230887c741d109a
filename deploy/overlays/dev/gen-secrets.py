#!/usr/bin/env python3
"""Write throwaway Secret files for the dev overlay (deploy/overlays/dev/secrets/).

The dev kustomization's secretGenerator reads these files; git ignores the directory. Existing
files are kept (so the Secrets, and the data encrypted or authenticated with them, stay stable
across applies) unless --force is given; the two datastore URLs are always rewritten from the
kept passwords.

Without --host-registry, an empty host registry is written (the gateway starts and trusts no
host until you add one; docs/operations.md "Hosts"). Without --keyring, a development keyring
with one random default KEK is written (format of engram_core.crypto.Keyring, version 1).
tls/ holds a throwaway development CA and one certificate per service identity (the layout of
a cert-manager Secret per identity: <identity>/ca.crt, tls.crt, tls.key; valid 30 days, --force
renews them); tls/operator/ is for `engram admin` and is not deployed. Run it with the
project's environment (``.venv/bin/python``: the certificates use ``cryptography`` through
engram_core.pki); prints what it did, never a value.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MONGO_MEMBERS = ",".join(f"engram-mongodb-{i}.engram-mongodb:27017" for i in range(3))
URL_FILES = ("mongo-url", "redis-url")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _write(path: Path, content: str, force: bool) -> bool:
    """Write ``content`` to ``path`` (mode 0600) unless it exists and ``force`` is off."""
    if path.exists() and not force:
        return False
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
    tmp.replace(path)
    return True


def _json_file(path: Path, source: str | None, default: object, force: bool) -> str:
    """Copy ``source`` (which must be JSON) to ``path``, or write ``default`` there."""
    if path.exists() and not force:
        return "kept"
    if source:
        json.loads(Path(source).read_text(encoding="utf-8"))
        shutil.copyfile(source, path)
        path.chmod(0o600)
        return f"copied from {source}"
    _write(path, json.dumps(default, indent=2) + "\n", force=True)
    return "generated"


def dev_keyring() -> dict[str, object]:
    """A version-1 keyring whose one default KEK serves every tenant (development only)."""
    kek = {"kek_id": "dev-" + secrets.token_hex(4), "key": _b64url(secrets.token_bytes(32))}
    return {"version": 1, "tenants": {}, "default": kek}


def generate(directory: Path, host_registry: str | None, keyring: str | None, force: bool) -> None:
    """Create every file the dev secretGenerator needs."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Hex values need no escaping inside URLs.
    plain = {
        "mongodb-username": "engram-root",
        "mongodb-password": secrets.token_hex(24),
        "redis-password": secrets.token_hex(24),
        # mongod reads at most 1024 base64 characters from a keyfile.
        "mongodb-keyfile": base64.b64encode(secrets.token_bytes(756)).decode("ascii"),
        "admin-token": secrets.token_urlsafe(32),
        "cursor-key": secrets.token_hex(32),
    }
    for name, value in plain.items():
        print(f"{name}: {'written' if _write(directory / name, value, force) else 'kept'}")
    user = (directory / "mongodb-username").read_text(encoding="utf-8")
    mongo_password = (directory / "mongodb-password").read_text(encoding="utf-8")
    redis_password = (directory / "redis-password").read_text(encoding="utf-8")
    urls = {
        "mongo-url": f"mongodb://{user}:{mongo_password}@{MONGO_MEMBERS}/?replicaSet=rs0&authSource=admin",
        "redis-url": f"redis://:{redis_password}@engram-redis:6379/0",
    }
    for name in URL_FILES:
        _write(directory / name, urls[name], force=True)
        print(f"{name}: written")
    print("host-registry.json:", _json_file(directory / "host-registry.json", host_registry, {"hosts": []}, force))
    print("keyring.json:", _json_file(directory / "keyring.json", keyring, dev_keyring(), force))
    print("tls:", _dev_pki(directory / "tls", force))


def _dev_pki(directory: Path, force: bool) -> str:
    """The development CA and service certificates, unless kept."""
    if (directory / "ca.crt").exists() and not force:
        return "kept"
    sys.path.insert(0, str(REPO))
    try:
        from engram_core.pki import create_dev_pki
    except ImportError:
        raise SystemExit("gen-secrets.py: run it with the project's environment (.venv/bin/python)") from None
    create_dev_pki(directory)
    return "generated (development CA, one certificate per service identity)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent / "secrets")
    parser.add_argument("--host-registry", help="host registry JSON file to use")
    parser.add_argument("--keyring", help="tenant KEK keyring JSON file to use")
    parser.add_argument("--force", action="store_true", help="regenerate existing files")
    args = parser.parse_args(argv)
    generate(args.dir, args.host_registry, args.keyring, args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
