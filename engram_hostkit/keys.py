"""Host signing keys: Ed25519, exchanged as raw 32 bytes in base64url (SPEC §2)."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_core.jws import private_key_to_b64url, public_key_to_b64url


def generate_host_keys() -> tuple[str, str]:
    """A fresh host key pair as ``(private_key_b64url, public_key_b64url)``.

    Register the public key with the gateway (host registry); keep the private key secret.
    """
    private_key = Ed25519PrivateKey.generate()
    return private_key_to_b64url(private_key), public_key_to_b64url(private_key.public_key())


def write_secret_file(path: str, text: str, *, overwrite: bool = False) -> None:
    """Write ``text`` to ``path`` readable by the owner only (mode 0600), atomically.

    The file is created 0600 from the start (never world-readable for a moment) and renamed
    into place; without ``overwrite`` an existing file is an error (:class:`FileExistsError`).
    """
    if not overwrite and os.path.exists(path):
        raise FileExistsError(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def keygen_main(argv: Sequence[str] | None = None) -> int:
    """``engram host keygen [--out FILE] [--force]``.

    Without ``--out``: print ``{"private_key": ..., "public_key": ...}`` as JSON. With
    ``--out``: write that JSON to FILE (mode 0600; refuses to overwrite unless ``--force``) and
    print only ``{"public_key": ...}``. Returns the process exit code.
    """
    parser = argparse.ArgumentParser(prog="engram host keygen", description="Generate an Ed25519 host key pair.")
    parser.add_argument("--out", metavar="FILE", help="write the key pair to FILE (mode 0600)")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    args = parser.parse_args(list(argv) if argv is not None else None)
    private_key, public_key = generate_host_keys()
    if args.out is None:
        print(json.dumps({"private_key": private_key, "public_key": public_key}))
        return 0
    payload = json.dumps({"private_key": private_key, "public_key": public_key}, indent=2) + "\n"
    try:
        write_secret_file(args.out, payload, overwrite=args.force)
    except FileExistsError:
        print(f"engram host keygen: {args.out} exists (use --force to overwrite)", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"engram host keygen: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 1
    print(json.dumps({"public_key": public_key}))
    return 0
