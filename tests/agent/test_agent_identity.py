"""The agent's key, certificate and pinned CA."""

from __future__ import annotations

import hashlib
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from agent.identity import (
    IdentityError,
    NotPairedError,
    install_certificate,
    load_or_create_identity,
    make_csr,
    pin_ca,
    server_ssl_context,
)
from agent.paths import AgentPaths
from daemon.pki import CertificateAuthority, cert_pem, fingerprint


def test_first_start_makes_a_private_key_and_a_self_signed_certificate(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent")
    identity = load_or_create_identity(paths, common_name="box")
    assert paths.key_file.stat().st_mode & 0o777 == 0o600
    assert identity.self_signed and identity.ca_cert is None
    der = identity.cert.public_bytes(serialization.Encoding.DER)
    assert identity.node_id == hashlib.sha256(der).hexdigest()
    assert load_or_create_identity(paths).node_id == identity.node_id  # stable across restarts


def test_pairing_signs_the_same_key_and_changes_the_node_id(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent")
    identity = load_or_create_identity(paths, common_name="box")
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    signed = ca.sign_csr(make_csr(identity), hosts=["127.0.0.1"])
    install_certificate(paths, cert_pem(signed))
    pin_ca(paths, cert_pem(ca.cert))
    paired = load_or_create_identity(paths)
    assert not paired.self_signed and paired.ca_cert == ca.cert
    assert paired.node_id == fingerprint(signed) != identity.node_id


def test_a_certificate_for_another_key_is_refused(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent")
    load_or_create_identity(paths)
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    _, cert = ca.issue_keypair(tmp_path, "other", "other", server=True, client=False)
    with pytest.raises(IdentityError, match="not issued"):
        install_certificate(paths, cert.read_bytes())
    paths.cert_file.write_bytes(cert.read_bytes())
    with pytest.raises(IdentityError, match="not issued"):
        load_or_create_identity(paths)


def test_server_context_needs_a_pinned_ca_and_requires_client_certificates(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent")
    with pytest.raises(NotPairedError, match="--ca"):
        server_ssl_context(load_or_create_identity(paths))
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    pin_ca(paths, cert_pem(ca.cert))
    ctx = server_ssl_context(load_or_create_identity(paths))
    assert ctx.minimum_version is ssl.TLSVersion.TLSv1_3
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "MirbadLLM local CA"),),)]
