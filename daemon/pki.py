"""The daemon's own certificate authority: it signs agent and daemon client certificates.

Keys are EC P-256, stored through ``core.key_store``: encrypted with a secret in the OS keychain
where one is usable, else 0600 files. A node id is the SHA-256 of its certificate (DER).
``read_ca_pem`` / ``install_ca_pem`` hand the CA to a backup and take it back from a restore.
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

from core.certs import is_ca, same_key
from core.key_store import KeyStoreError, read_key, read_key_pem, write_key

_LOGGER = logging.getLogger(__name__)

CA_DAYS = 3650
CA_KEY_FILE, CA_CERT_FILE = "ca.key", "ca.crt"
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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def load_or_create(cls, directory: Path, name: str = "MirbadLLM local CA") -> CertificateAuthority:
        key_path, cert_path = directory / CA_KEY_FILE, directory / CA_CERT_FILE
        if key_path.exists() and cert_path.exists():
            key = read_key(key_path)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise KeyStoreError(f"{key_path} is not an EC key")
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            if not same_key(key, cert):
                raise KeyStoreError(f"{key_path} is not the key of {cert_path}: restore the CA (or the home) "
                                    "from a backup")
            return cls(key, cert)
        if key_path.exists() or cert_path.exists():  # half a CA: never replaced by a new one silently
            there, gone = (key_path, cert_path) if key_path.exists() else (cert_path, key_path)
            raise KeyStoreError(f"{there} exists but {gone} does not: restore {gone.name} (or the home from a "
                                f"backup); only if that is impossible move {there.name} away too, and pair every "
                                "node again with the new CA")
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
        write_key(key_path, key)
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
        """Sign an agent's certificate request: server use, and client use for one agent's tunnel to
        another's rpc-server (one model across nodes, ``agent.api.rpc``)."""
        csr = x509.load_pem_x509_csr(csr_pem)
        if not csr.is_signature_valid:
            raise ValueError("certificate request signature is invalid")
        pub = csr.public_key()
        if not isinstance(pub, ec.EllipticCurvePublicKey):
            raise TypeError("only EC keys are accepted")
        cn = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        name = str(cn[0].value) if cn else "mirbadllm-agent"
        return self.sign(pub, name, server=True, client=True, hosts=hosts)

    def issue_keypair(self, directory: Path, stem: str, common_name: str, *, server: bool, client: bool,
                      hosts: list[str] | None = None) -> tuple[Path, Path]:
        """Make a key and a signed certificate as ``{stem}.key`` / ``{stem}.crt`` in ``directory``."""
        key = new_key()
        cert = self.sign(key.public_key(), common_name, server=server, client=client, hosts=hosts)
        key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.crt"
        write_key(key_path, key)
        cert_path.write_bytes(cert_pem(cert))
        return key_path, cert_path


def read_ca_pem(directory: Path) -> tuple[bytes, bytes]:
    """The CA in ``directory`` as (unencrypted PKCS#8 key PEM, certificate PEM), for a backup that
    encrypts them itself. KeyStoreError when the key cannot be read (e.g. its keychain secret is gone)."""
    return read_key_pem(directory / CA_KEY_FILE), (directory / CA_CERT_FILE).read_bytes()


def install_ca_pem(directory: Path, key_pem_bytes: bytes, cert_pem_bytes: bytes) -> CertificateAuthority:
    """Make ``directory``'s CA the given one (a restore): checked first, the key stored as any other key
    (encrypted where a keychain is usable), the certificate written atomically. ValueError when the pair
    is no CA or the key is not the certificate's (TypeError: not an EC key). Certificates the old CA signed for this daemon are
    reissued at the next start (``daemon.tls`` checks them against the CA)."""
    try:
        key = serialization.load_pem_private_key(key_pem_bytes, password=None)
        cert = x509.load_pem_x509_certificate(cert_pem_bytes)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM key and certificate: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key is not an EC key")
    if not same_key(key, cert):
        raise ValueError("the CA key does not belong to the CA certificate")
    if not is_ca(cert):
        raise ValueError("the certificate is not a certificate authority")
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / CA_CERT_FILE
    tmp = cert_path.with_name(cert_path.name + ".tmp")
    tmp.write_bytes(cert_pem(cert))
    write_key(directory / CA_KEY_FILE, key)
    os.replace(tmp, cert_path)
    _LOGGER.info("installed a certificate authority in %s", directory)
    return CertificateAuthority(key, cert)
