"""The one place backup and restore read and replace the daemon's CA: ``daemon.pki``'s
``read_ca_pem`` and ``install_ca_pem`` (the key is kept encrypted at rest there; a backup gets it in
clear only to seal it into its own encrypted section). The daemon's client identity
(``pki/daemon-client.key``/``.crt``) travels with the CA: a paired agent pins that exact
certificate, so a daemon restored with a new one would be refused by every node.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from core.json_store import write_atomic
from core.key_store import read_key_pem, write_key
from daemon.api.backup import BackupCa
from daemon.pki import CA_CERT_FILE, CA_KEY_FILE, install_ca_pem, read_ca_pem
from daemon.tls import CLIENT_STEM

_LOGGER = logging.getLogger(__name__)


def read_ca(pki_dir: Path) -> BackupCa | None:
    """The CA's key and certificate as PEM; None when this home has none yet."""
    if not ((pki_dir / CA_KEY_FILE).exists() and (pki_dir / CA_CERT_FILE).exists()):
        return None
    key, cert = read_ca_pem(pki_dir)
    return BackupCa(key_pem=key.decode("ascii"), cert_pem=cert.decode("ascii"))


def current_cert(pki_dir: Path) -> x509.Certificate | None:
    """The CA certificate in effect on disk (no key read)."""
    try:
        return x509.load_pem_x509_certificate((pki_dir / CA_CERT_FILE).read_bytes())
    except (OSError, ValueError):
        return None


def check_ca(ca: BackupCa) -> x509.Certificate:
    """The certificate, after checking that the key is its key (ValueError otherwise)."""
    cert = x509.load_pem_x509_certificate(ca.cert_pem.encode("ascii"))
    key = serialization.load_pem_private_key(ca.key_pem.encode("ascii"), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise ValueError("the backup's key does not belong to its certificate")
    return cert


def replace_ca(pki_dir: Path, ca: BackupCa) -> None:
    """Make ``ca`` this daemon's CA on disk. The running daemon keeps the CA it loaded; at its next
    start it issues its client certificate and the local agent's identity from this one."""
    try:
        install_ca_pem(pki_dir, ca.key_pem.encode("ascii"), ca.cert_pem.encode("ascii"))
    except TypeError as exc:
        raise ValueError(str(exc)) from exc
    _LOGGER.info("the CA in %s was replaced from a backup; it takes effect at the next start", pki_dir)


def read_client(pki_dir: Path) -> BackupCa | None:
    """The daemon's client key and certificate as PEM; None when there are none yet."""
    key_path, cert_path = pki_dir / f"{CLIENT_STEM}.key", pki_dir / f"{CLIENT_STEM}.crt"
    if not (key_path.exists() and cert_path.exists()):
        return None
    return BackupCa(key_pem=read_key_pem(key_path).decode("ascii"), cert_pem=cert_path.read_text(encoding="ascii"))


def replace_client(pki_dir: Path, client: BackupCa, ca_cert: x509.Certificate) -> None:
    """Make ``client`` the daemon's client identity (its key stored like every key, encrypted where a
    keychain is usable); ValueError unless the key is the certificate's and ``ca_cert`` signed it."""
    cert = check_ca(client)
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise ValueError("the backup's daemon client certificate is not signed by its CA") from exc
    key = serialization.load_pem_private_key(client.key_pem.encode("ascii"), password=None)
    write_key(pki_dir / f"{CLIENT_STEM}.key", key)
    write_atomic(pki_dir / f"{CLIENT_STEM}.crt", client.cert_pem.encode("ascii"), 0o644)
