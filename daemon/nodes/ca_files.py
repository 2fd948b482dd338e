"""A CA rotation's files: the new CA waiting in ``pki/ca-next/``, and making it the daemon's.

``install_pending`` makes the new CA and its client certificate the daemon's (``pki/ca.*``,
``pki/daemon-client.*``) and removes ``ca-next/``. It is the one step of a rotation that a crash
could cut in half; ``finish_interrupted_retirement``, run before anything reads ``pki/`` at start,
completes it then. Otherwise the start would issue a fresh client certificate (``daemon.tls``), one no
agent pins, and no node would let the daemon in.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from core.json_store import write_atomic
from core.key_store import forget, read_key, read_key_pem, write_key
from daemon.nodes.store import issued_by
from daemon.pki import CA_CERT_FILE, CA_KEY_FILE, CertificateAuthority, install_ca_pem
from daemon.tls import CLIENT_STEM

_LOGGER = logging.getLogger(__name__)

PENDING_CA_DIR = "ca-next"  # under pki/: a CA rotation's new CA until it retires the old (daemon.nodes.ca_rotation)


def install_pending(pki_dir: Path) -> tuple[CertificateAuthority, tuple[Path, Path]]:
    """The pending CA and client certificate become the daemon's; the CA and the (key, cert) files."""
    pending = pki_dir / PENDING_CA_DIR
    key_path, cert_path = pki_dir / f"{CLIENT_STEM}.key", pki_dir / f"{CLIENT_STEM}.crt"
    # The client certificate first: agents pin the old and the new one until they are told otherwise.
    write_key(key_path, read_key(pending / f"{CLIENT_STEM}.key"))
    write_atomic(cert_path, (pending / f"{CLIENT_STEM}.crt").read_bytes(), 0o644)
    ca = install_ca_pem(pki_dir, read_key_pem(pending / CA_KEY_FILE), (pending / CA_CERT_FILE).read_bytes())
    for key_file in (pending / CA_KEY_FILE, pending / f"{CLIENT_STEM}.key"):
        forget(key_file)
    shutil.rmtree(pending, ignore_errors=True)
    return ca, (key_path, cert_path)


def finish_interrupted_retirement(pki_dir: Path) -> bool:
    """When the daemon stopped halfway through making the pending CA its own (its client certificate
    or its CA already the new one), finish it; True when it did."""
    pending = pki_dir / PENDING_CA_DIR
    try:
        new_ca = (pending / CA_CERT_FILE).read_text()
        started = (pki_dir / CA_CERT_FILE).read_text() == new_ca or \
            issued_by((pki_dir / f"{CLIENT_STEM}.crt").read_text(), CertificateAuthority.load_or_create(pending).cert)
    except OSError:
        return False
    if not started:
        return False
    install_pending(pki_dir)
    _LOGGER.warning("finished a CA rotation's retirement that was interrupted: the new CA is the daemon's")
    return True
