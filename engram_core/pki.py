"""Service identities of the internal gRPC plane: a throwaway development CA and one
certificate per process identity, and the identity a TLS peer proves.

An identity is carried in the certificate as a SAN URI ``spiffe://engram/<name>`` (the SPIFFE
form service meshes use; cert-manager issues it from a ``uris:`` entry). Certificates also name
``localhost``, ``127.0.0.1`` and the service's DNS names, so one certificate serves as client
and server identity of a process. One identity's files are a directory in the layout of a
cert-manager Secret (``ca.crt``, ``tls.crt``, ``tls.key``), so ``ENGRAM_TLS_DIR`` points at a
mounted Secret in Kubernetes and at ``<state_dir>/pki/<identity>`` under ``engram up``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

IDENTITIES = ("gateway", "storage", "search", "admission", "worker", "operator")
TRUST_DOMAIN = "engram"
URI_PREFIX = f"spiffe://{TRUST_DOMAIN}/"
CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
VALID_DAYS = 30


@dataclass(frozen=True)
class IdentityFiles:
    """One identity's PEM files: a directory holding ``ca.crt``, ``tls.crt`` and ``tls.key``."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / CA_FILE

    @property
    def cert(self) -> Path:
        return self.directory / CERT_FILE

    @property
    def key(self) -> Path:
        return self.directory / KEY_FILE

    def read(self) -> tuple[bytes, bytes, bytes]:
        """``(ca, cert, key)`` as bytes, for grpc's ``ssl_*_credentials``."""
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()


def server_name(name: str) -> str:
    """The DNS name every certificate of identity ``name`` carries and every client expects of
    a server of that identity (whatever address it dials: pod IPs of search replicas, loopback),
    so that server authentication is identity authentication."""
    if name not in IDENTITIES:
        raise ValueError("unknown service identity")
    return f"{name}.{TRUST_DOMAIN}"


def identity_uri(name: str) -> str:
    if name not in IDENTITIES:
        raise ValueError("unknown service identity")
    return URI_PREFIX + name


def identity_of(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The service identity a TLS peer proved (from grpc's ``context.auth_context()``), or
    None: no client certificate, or none naming exactly one known identity."""
    return _one_identity(value.decode("utf-8", "replace")
                         for value in auth_context.get("x509_subject_alternative_name", ()))


def certificate_identity(pem: bytes) -> str | None:
    """The service identity a PEM certificate names (its SAN URIs), or None."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    return _one_identity(sans.get_values_for_type(x509.UniformResourceIdentifier))


def _one_identity(values: Iterable[str]) -> str | None:
    names = {value[len(URI_PREFIX):] for value in values if value.startswith(URI_PREFIX)}
    if len(names) != 1:
        return None
    (name,) = names
    return name if name in IDENTITIES else None


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def create_dev_pki(directory: Path, identities: Iterable[str] = IDENTITIES, *,
                   dns_names: Iterable[str] = ("localhost",)) -> dict[str, IdentityFiles]:
    """A fresh CA and a certificate per identity under ``directory`` (``ca.crt``, and one
    sub-directory per identity in the Secret layout; directories 0700, keys 0600, certificates
    0644). The CA's key is not kept: nothing can be issued later, a new run makes a new CA."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "engram development CA")])
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    _write(directory / CA_FILE, ca_pem, 0o644)
    out = {}
    for name in identities:
        key = _key()
        sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(identity_uri(name)),
                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        sans += [x509.DNSName(dns) for dns in (server_name(name), *dns_names)]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"engram-{name}")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        files = IdentityFiles(directory / name)
        files.directory.mkdir(exist_ok=True)
        os.chmod(files.directory, 0o700)
        _write(files.ca, ca_pem, 0o644)
        _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        _write(files.key, _pem_key(key), 0o600)
        out[name] = files
    return out
