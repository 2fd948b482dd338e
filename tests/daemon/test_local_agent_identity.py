"""This machine's agent gets a certificate it can also present as a client (to a helper's tunnel,
as the main node of a model across nodes); one from before, without client use, is issued again."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from agent.api.models import IDENTITY_CERT_FILE
from daemon.pki import CertificateAuthority
from daemon.tls import ensure_local_agent_identity


def _cert(identity: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((identity / IDENTITY_CERT_FILE).read_bytes())


def _uses(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_an_old_server_only_certificate_is_issued_again_with_client_use(tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    identity = tmp_path / "agent" / "identity"
    identity.mkdir(parents=True)
    ca.issue_keypair(identity, "agent", "mirbadllm-local-agent", server=True, client=False, hosts=["127.0.0.1"])
    old = _cert(identity)
    assert _uses(old) == {ExtendedKeyUsageOID.SERVER_AUTH}

    node_id = ensure_local_agent_identity(ca, identity)
    new = _cert(identity)
    assert new.serial_number != old.serial_number
    assert _uses(new) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert node_id == hashlib.sha256(new.public_bytes(serialization.Encoding.DER)).hexdigest()

    assert ensure_local_agent_identity(ca, identity) == node_id  # a good one is kept: the same node id
    assert _cert(identity).serial_number == new.serial_number
