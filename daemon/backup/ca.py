"""The one place backup and restore read and replace the daemon's CA (``daemon.pki``).

The CA's key storage belongs to ``daemon.pki``; these two functions are the only calls backup makes
into it, so a change of how it keeps the key is a change here alone.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from daemon.api.backup import BackupCa
from daemon.pki import CertificateAuthority, cert_pem, key_pem, write_private

_LOGGER = logging.getLogger(__name__)


def read_ca(pki_dir: Path) -> BackupCa | None:
    """The CA's key and certificate as PEM; None when this home has none yet."""
    if not ((pki_dir / "ca.key").exists() and (pki_dir / "ca.crt").exists()):
        return None
    ca = CertificateAuthority.load_or_create(pki_dir)
    return BackupCa(key_pem=key_pem(ca.key).decode("ascii"), cert_pem=cert_pem(ca.cert).decode("ascii"))


def check_ca(ca: BackupCa) -> x509.Certificate:
    """The certificate, after checking that the key is its key (ValueError otherwise)."""
    cert = x509.load_pem_x509_certificate(ca.cert_pem.encode("ascii"))
    key = serialization.load_pem_private_key(ca.key_pem.encode("ascii"), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise ValueError("the backup's CA key does not belong to its certificate")
    return cert


def replace_ca(pki_dir: Path, ca: BackupCa) -> None:
    """Make ``ca`` this daemon's CA on disk. The running daemon keeps the CA it loaded; at its next
    start it issues its client certificate and the local agent's identity from this one."""
    check_ca(ca)
    write_private(pki_dir / "ca.key", ca.key_pem.encode("ascii"))
    (pki_dir / "ca.crt").write_bytes(ca.cert_pem.encode("ascii"))
    _LOGGER.info("the CA in %s was replaced from a backup; it takes effect at the next start", pki_dir)
