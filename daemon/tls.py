"""The daemon's side of mutual TLS: its CA, its client certificate, and the local agent's identity."""

from __future__ import annotations

import ssl
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from agent.api.models import IDENTITY_CA_FILE, IDENTITY_CERT_FILE, IDENTITY_KEY_FILE
from core.key_store import KeysAtRest, at_rest, keychain, load_cert_chain
from daemon.pki import CA_KEY_FILE, CertificateAuthority, cert_pem, fingerprint

CLIENT_STEM = "daemon-client"


def ensure_client_certificate(ca: CertificateAuthority, pki_dir: Path) -> tuple[Path, Path]:
    key, cert = pki_dir / f"{CLIENT_STEM}.key", pki_dir / f"{CLIENT_STEM}.crt"
    if not (key.exists() and cert.exists() and _issued_by(cert, ca)):
        ca.issue_keypair(pki_dir, CLIENT_STEM, "mirbadllm-daemon", server=False, client=True)
    return key, cert


def client_ssl_context(ca_cert: Path, key: Path, cert: Path) -> ssl.SSLContext:
    """TLS 1.3 only; the agent must present a certificate from our CA (names are not checked:
    agents are identified by certificate, not by whatever address they are reached at)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_cert))
    ctx.check_hostname = False
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    load_cert_chain(ctx, cert, key)  # the key may be encrypted with a keychain secret
    return ctx


def keys_at_rest(pki_dir: Path, local_identity_dir: Path | None) -> KeysAtRest:
    """How the daemon's private keys are stored: the CA's, its client key, the local agent's."""
    return at_rest(_key_files(pki_dir, local_identity_dir))


def _key_files(pki_dir: Path, local_identity_dir: Path | None) -> list[Path]:
    keys = [pki_dir / CA_KEY_FILE, pki_dir / f"{CLIENT_STEM}.key"]
    return keys + ([local_identity_dir / IDENTITY_KEY_FILE] if local_identity_dir else [])


class KeysAtRestReader:
    """``keys_at_rest`` for ``/api/status``, which the app asks several times a second: the key files
    are read and scanned again only when one changes (inode, size, time) or the keychain does, else a
    stat each (reading them was a third of the answer's CPU, on the loop the /v1 streams share)."""

    def __init__(self, pki_dir: Path, local_identity_dir: Path | None) -> None:
        self._keys = _key_files(pki_dir, local_identity_dir)
        self._seen: tuple[object, ...] = ()
        self._state: KeysAtRest | None = None

    def __call__(self) -> KeysAtRest:
        backend, reason = keychain()
        seen = (backend is not None, reason, *(_stamp(path) for path in self._keys))
        if self._state is None or seen != self._seen:
            self._state, self._seen = at_rest(self._keys), seen
        return self._state


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def ensure_local_agent_identity(ca: CertificateAuthority, identity_dir: Path) -> str:
    """Give this machine's agent a certificate from our CA and pin our CA in it; its node id (the
    SHA-256 of the certificate, DER), the one a helper's grant names when it is a model's main node.

    The local agent is enrolled by writing its files directly: same machine, same user. A
    certificate without client use (issued before an agent could be another's client, as the main
    node of a model across nodes is of its helpers') is issued again.
    """
    identity_dir.mkdir(parents=True, exist_ok=True)
    cert_path = identity_dir / IDENTITY_CERT_FILE
    if not (cert_path.exists() and (identity_dir / IDENTITY_KEY_FILE).exists() and _issued_by(cert_path, ca)
            and _client_use(cert_path)):
        ca.issue_keypair(identity_dir, Path(IDENTITY_KEY_FILE).stem, "mirbadllm-local-agent",
                         server=True, client=True, hosts=["127.0.0.1", "localhost", "::1"])
    (identity_dir / IDENTITY_CA_FILE).write_bytes(cert_pem(ca.cert))
    return fingerprint(x509.load_pem_x509_certificate(cert_path.read_bytes()))


def _client_use(cert_path: Path) -> bool:
    try:
        usage = x509.load_pem_x509_certificate(cert_path.read_bytes()).extensions.get_extension_for_class(
            x509.ExtendedKeyUsage).value
    except (ValueError, OSError, x509.ExtensionNotFound):
        return False
    return ExtendedKeyUsageOID.CLIENT_AUTH in usage


def _issued_by(cert_path: Path, ca: CertificateAuthority) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        cert.verify_directly_issued_by(ca.cert)
        return True
    except (ValueError, TypeError, OSError, Exception):  # noqa: BLE001 - any failure: reissue
        return False
