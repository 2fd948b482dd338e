"""The daemon's own certificate authority: it signs agent and daemon client certificates.

Keys are EC P-256; the CA key is written 0600. A node id is the SHA-256 of its certificate (DER).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_LOGGER = logging.getLogger(__name__)

CA_DAYS = 3650
LEAF_DAYS = 825


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 of the DER certificate, hex: the node id."""
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file readable by its owner only, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def load_or_create(cls, directory: Path, name: str = "MirbadLLM local CA") -> CertificateAuthority:
        key_path, cert_path = directory / "ca.key", directory / "ca.crt"
        if key_path.exists() and cert_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            return cls(key, x509.load_pem_x509_certificate(cert_path.read_bytes()))
        key = new_key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - dt.timedelta(minutes=5))
            .not_valid_after(_now() + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        write_private(key_path, key_pem(key))
        cert_path.write_bytes(cert_pem(cert))
        _LOGGER.info("created certificate authority in %s", directory)
        return cls(key, cert)

    def sign(self, public_key: ec.EllipticCurvePublicKey, common_name: str, *, server: bool, client: bool,
             hosts: list[str] | None = None, days: int = LEAF_DAYS,
             not_before: dt.datetime | None = None) -> x509.Certificate:
        """Issue a leaf certificate for ``public_key``."""
        start = not_before or (_now() - dt.timedelta(minutes=5))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                           critical=False)
        )
        names: list[x509.GeneralName] = []
        for host in hosts or []:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256())

    def sign_csr(self, csr_pem: bytes, *, hosts: list[str] | None = None) -> x509.Certificate:
        """Sign an agent's certificate request (server use only: agents never call agents)."""
        csr = x509.load_pem_x509_csr(csr_pem)
        if not csr.is_signature_valid:
            raise ValueError("certificate request signature is invalid")
        pub = csr.public_key()
        if not isinstance(pub, ec.EllipticCurvePublicKey):
            raise TypeError("only EC keys are accepted")
        cn = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        name = str(cn[0].value) if cn else "mirbadllm-agent"
        return self.sign(pub, name, server=True, client=False, hosts=hosts)

    def issue_keypair(self, directory: Path, stem: str, common_name: str, *, server: bool, client: bool,
                      hosts: list[str] | None = None) -> tuple[Path, Path]:
        """Make a key and a signed certificate as ``{stem}.key`` / ``{stem}.crt`` in ``directory``."""
        key = new_key()
        cert = self.sign(key.public_key(), common_name, server=server, client=client, hosts=hosts)
        key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.crt"
        write_private(key_path, key_pem(key))
        cert_path.write_bytes(cert_pem(cert))
        return key_path, cert_path
