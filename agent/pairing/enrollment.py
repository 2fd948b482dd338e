"""What pairing leaves on disk, and the TLS contexts of an agent before and after it.

Paired means ``identity/ca.crt`` exists. A paired agent also pins the daemon's client certificate
it received while pairing (``identity/daemon.crt``). Its server context trusts the pinned CA, so
an expired certificate, one from another CA or none at all fails the handshake; a certificate the
same CA signed for someone else (another node's agent, reaching a grant's RPC tunnel) gets through
the handshake and only as far as ``agent.rpc.peers`` lets it: the pinned daemon certificate reaches
everything, another node's only the tunnel of a grant naming it, 403 elsewhere. The pinned
certificate is checked against the pinned CA whenever the context is built. An agent whose
identity the daemon wrote directly (its own machine's agent) has no such pin and trusts the CA.

A CA rotation (``install_trust``, from ``agent.trust``) rewrites the same files over mutual TLS:
``ca.crt`` and ``daemon.crt`` may then hold two certificates each (the old and the new CA, the old
and the new daemon certificate) until the daemon retires the old CA.

Unpairing removes every identity file; the next start makes a new key and a new self-signed
certificate, so the old node id (and any certificate signed for the old key) is dead for good.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from agent.api.pairing import IDENTITY_DAEMON_FILE
from agent.identity import (
    AgentIdentity,
    IdentityError,
    install_certificate,
    load_or_create_identity,
    pin_ca,
    server_ssl_context,
)
from agent.paths import AgentPaths
from core.certs import is_ca, issued_by
from core.json_store import write_atomic
from core.key_store import forget, load_cert_chain

_LOGGER = logging.getLogger(__name__)


def daemon_pin_file(paths: AgentPaths) -> Path:
    return paths.identity_dir / IDENTITY_DAEMON_FILE


def is_paired(paths: AgentPaths) -> bool:
    return paths.ca_file.exists()


def _cert(pem: str, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError as exc:
        raise IdentityError(f"{what} is not a PEM certificate: {exc}") from exc


def _has_usage(cert: x509.Certificate, usage: x509.ObjectIdentifier) -> bool:
    try:
        return usage in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False


def check_enrollment(ca_pem: str, agent_cert_pem: str, daemon_cert_pem: str) -> None:
    """Refuse material that could not work: IdentityError says which part is wrong."""
    ca = _cert(ca_pem, "the CA certificate")
    if not is_ca(ca):
        raise IdentityError("the CA certificate is not a certificate authority")
    if not issued_by(_cert(agent_cert_pem, "the agent certificate"), ca):
        raise IdentityError("the agent certificate was not signed by the CA it came with")
    daemon = _cert(daemon_cert_pem, "the daemon's client certificate")
    if not issued_by(daemon, ca) or not _has_usage(daemon, ExtendedKeyUsageOID.CLIENT_AUTH):
        raise IdentityError("the daemon's client certificate is not a client certificate from that CA")


def install_enrollment(paths: AgentPaths, ca_pem: str, agent_cert_pem: str, daemon_cert_pem: str) -> AgentIdentity:
    """Write what a daemon handed over while pairing; ``ca.crt`` last, as it means "paired"."""
    check_enrollment(ca_pem, agent_cert_pem, daemon_cert_pem)
    install_certificate(paths, agent_cert_pem.encode())  # also checks it is for our own key
    write_atomic(daemon_pin_file(paths), daemon_cert_pem.encode(), 0o644)
    pin_ca(paths, ca_pem.encode())
    return load_or_create_identity(paths)


def pinned_cas(paths: AgentPaths) -> list[x509.Certificate]:
    """Every CA ``ca.crt`` pins (two during a CA rotation's overlap); [] when unpaired."""
    try:
        return x509.load_pem_x509_certificates(paths.ca_file.read_bytes())
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise IdentityError(f"{paths.ca_file} is not a PEM certificate bundle: {exc}") from exc


def install_trust(paths: AgentPaths, ca_pems: list[str], agent_cert_pem: str,
                  daemon_cert_pems: list[str]) -> AgentIdentity:
    """Trust ``ca_pems`` (and pin ``daemon_cert_pems``; none: no pin) from now on, with
    ``agent_cert_pem`` as this agent's certificate. Everything is checked before a file is written:
    IdentityError says which part is wrong. ``ca.crt`` is written last, as in pairing."""
    cas = [_cert(pem, "a CA certificate") for pem in ca_pems]
    if not cas or not all(is_ca(ca) for ca in cas):
        raise IdentityError("every CA certificate must be a certificate authority")
    if not any(issued_by(_cert(agent_cert_pem, "the agent certificate"), ca) for ca in cas):
        raise IdentityError("the agent certificate was not signed by any of the CAs it came with")
    for pem in daemon_cert_pems:
        daemon = _cert(pem, "a daemon client certificate")
        if not any(issued_by(daemon, ca) for ca in cas) or not _has_usage(daemon, ExtendedKeyUsageOID.CLIENT_AUTH):
            raise IdentityError("a daemon client certificate is not a client certificate from those CAs")
    install_certificate(paths, agent_cert_pem.encode())  # also checks it is for our own key
    pin = daemon_pin_file(paths)
    if daemon_cert_pems:
        write_atomic(pin, "".join(p if p.endswith("\n") else p + "\n" for p in daemon_cert_pems).encode(), 0o644)
    else:
        pin.unlink(missing_ok=True)
    write_atomic(paths.ca_file, "".join(p if p.endswith("\n") else p + "\n" for p in ca_pems).encode(), 0o644)
    _LOGGER.info("now trusting %d CA(s) and pinning %d daemon certificate(s)", len(cas), len(daemon_cert_pems))
    return load_or_create_identity(paths)


def reset_identity(paths: AgentPaths) -> None:
    """Forget the pairing and the key: the next identity is a new node."""
    for path in (paths.ca_file, daemon_pin_file(paths), paths.cert_file):
        path.unlink(missing_ok=True)
    forget(paths.key_file)  # the key file and its keychain secret
    _LOGGER.info("identity in %s removed: this agent is unpaired", paths.identity_dir)


def paired_ssl_context(identity: AgentIdentity) -> ssl.SSLContext:
    """Mutual TLS 1.3: a client certificate the pinned CA signed gets in; the peer gate
    (``agent.rpc.peers``) tells the pinned daemon certificate from another node's."""
    pin = daemon_pin_file(identity.paths)
    if not pin.exists():
        return server_ssl_context(identity)
    cas = pinned_cas(identity.paths)
    if not cas:
        raise IdentityError(f"{pin} exists but no CA is pinned; run `mirbadllm agent --unpair` and pair again")
    try:
        pins = x509.load_pem_x509_certificates(pin.read_bytes())
    except ValueError as exc:
        raise IdentityError(f"{pin} is not a PEM certificate: {exc}") from exc
    if not all(any(issued_by(cert, ca) for ca in cas) for cert in pins):
        raise IdentityError(f"{pin} was not issued by the pinned CA; run `mirbadllm agent --unpair` and pair again")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(identity.paths.ca_file))  # the CA; who is the daemon: agent.rpc.peers
    load_cert_chain(ctx, identity.paths.cert_file, identity.paths.key_file)  # the key may be encrypted
    return ctx


def pairing_ssl_context(identity: AgentIdentity) -> ssl.SSLContext:
    """TLS 1.3 with the agent's own certificate and no client certificate: anyone may ask to pair."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_mode = ssl.CERT_NONE
    load_cert_chain(ctx, identity.paths.cert_file, identity.paths.key_file)  # the key may be encrypted
    return ctx
