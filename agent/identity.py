"""The agent's identity: an EC P-256 key, its certificate and the pinned CA.

The key is made once and never leaves ``identity/``; it is stored through ``core.key_store``
(encrypted with a secret in the OS keychain where one is usable, else a 0600 file). Until a daemon
signs a certificate for it the agent holds a self-signed one; the node id is the SHA-256 of whichever certificate it holds (DER).
``ca.crt`` pins the daemon's certificate authority: only clients with a certificate it signed get
in (``server_ssl_context``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agent.paths import AgentPaths
from core.certs import same_key
from core.json_store import write_atomic
from core.key_store import KeyStoreError, load_cert_chain, read_key, write_key

_LOGGER = logging.getLogger(__name__)

SELF_SIGNED_DAYS = 825


class IdentityError(Exception):
    """The identity files are unusable; the message says which and what to do."""


class NotPairedError(IdentityError):
    """No CA is pinned yet, so no client could ever be verified."""


@dataclass(frozen=True)
class AgentIdentity:
    """The loaded identity files."""

    paths: AgentPaths
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    ca_cert: x509.Certificate | None

    @property
    def node_id(self) -> str:
        """SHA-256 hex of the certificate (DER): changes when a daemon signs a new certificate."""
        return hashlib.sha256(self.cert.public_bytes(serialization.Encoding.DER)).hexdigest()

    @property
    def self_signed(self) -> bool:
        return self.cert.issuer == self.cert.subject


def _write_public(path: Path, data: bytes) -> None:
    write_atomic(path, data, 0o644)  # a certificate: public, as a plain write left it


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = read_key(path)  # encrypted in place when a keychain is usable
    except KeyStoreError as exc:
        raise IdentityError(str(exc)) from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise IdentityError(f"{path} is not an EC key; move it away to make a new one")
    return key


def _load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as exc:
        raise IdentityError(f"{path} is not a PEM certificate ({exc})") from exc


def _self_signed(key: ec.EllipticCurvePrivateKey, common_name: str) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    hosts: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    if common_name != "localhost":
        hosts.insert(0, x509.DNSName(common_name))
    return (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(hosts), critical=False)
        .sign(key, hashes.SHA256())
    )


def load_or_create_identity(paths: AgentPaths, common_name: str | None = None) -> AgentIdentity:
    """Load ``identity/``; make the key (0600) and a self-signed certificate where missing."""
    paths.identity_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = common_name or socket.gethostname() or "mirbadllm-agent"
    if paths.key_file.exists():
        key = _load_key(paths.key_file)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
        encrypted = write_key(paths.key_file, key)
        _LOGGER.info("made a new agent key in %s (%s)", paths.key_file,
                     "encrypted with a keychain secret" if encrypted else "a 0600 file: no keychain")
        if paths.cert_file.exists():  # a certificate for some older key is worthless now
            paths.cert_file.unlink()
    if paths.cert_file.exists():
        cert = _load_cert(paths.cert_file)
        if not same_key(key, cert):
            raise IdentityError(f"{paths.cert_file} was not issued for {paths.key_file}; "
                                "remove the certificate (or pair the agent again)")
    else:
        cert = _self_signed(key, name)
        _write_public(paths.cert_file, cert.public_bytes(serialization.Encoding.PEM))
        _LOGGER.info("made a self-signed agent certificate in %s", paths.cert_file)
    ca_cert = _load_cert(paths.ca_file) if paths.ca_file.exists() else None
    return AgentIdentity(paths=paths, key=key, cert=cert, ca_cert=ca_cert)


def pin_ca(paths: AgentPaths, ca_pem: bytes) -> None:
    """Pin the daemon's CA: from now on only clients it signed are let in."""
    _load_cert_bytes(ca_pem)
    paths.identity_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _write_public(paths.ca_file, ca_pem)
    _LOGGER.info("pinned the CA in %s", paths.ca_file)


def install_certificate(paths: AgentPaths, cert_pem: bytes) -> None:
    """Replace the agent certificate with one a daemon signed for the agent's own key."""
    cert = _load_cert_bytes(cert_pem)
    key = _load_key(paths.key_file)
    if not same_key(key, cert):
        raise IdentityError("the certificate was not issued for this agent's key")
    _write_public(paths.cert_file, cert_pem)


def _load_cert_bytes(pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise IdentityError(f"not a PEM certificate: {exc}") from exc


def make_csr(identity: AgentIdentity, common_name: str | None = None) -> bytes:
    """A PEM certificate request for the agent's key, for a daemon to sign while pairing."""
    name = common_name or socket.gethostname() or "mirbadllm-agent"
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(identity.key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def server_ssl_context(identity: AgentIdentity) -> ssl.SSLContext:
    """TLS 1.3 only; a client certificate is required and verified against the pinned CA alone."""
    if identity.ca_cert is None:
        raise NotPairedError(f"no CA is pinned in {identity.paths.ca_file}: pair this agent with a daemon, "
                             "or start it with --ca FILE")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    # Only the pinned CA: the system trust store is never loaded into this context.
    ctx.load_verify_locations(cafile=str(identity.paths.ca_file))
    load_cert_chain(ctx, identity.paths.cert_file, identity.paths.key_file)
    return ctx
