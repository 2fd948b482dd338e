"""Private keys at rest (core.key_store): encrypted with a keychain secret, migrated from plain
files, 0600 files with a warning where no keychain can be used, and a clear error when the secret is gone."""

from __future__ import annotations

import os
import ssl
import stat
from pathlib import Path

import keyring
import pytest
from cryptography.hazmat.primitives import serialization
from keyring.backends import fail

from agent.identity import IdentityError, load_or_create_identity, server_ssl_context
from agent.pairing.enrollment import reset_identity
from agent.paths import AgentPaths
from core.key_store import (
    SERVICE,
    KeyStoreError,
    account,
    at_rest,
    load_cert_chain,
    read_key,
)
from daemon.pki import CertificateAuthority, install_ca_pem, key_pem, read_ca_pem
from daemon.tls import KeysAtRestReader, ensure_client_certificate, keys_at_rest
from tests.fakes.keychain import ForgetfulKeychain, MemoryKeychain, RefusingKeychain

PLAIN_MARKS = (b"BEGIN PRIVATE KEY", b"BEGIN EC PRIVATE KEY")


def _public(ca: CertificateAuthority) -> bytes:
    return ca.key.public_key().public_bytes(serialization.Encoding.DER,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def use_keychain(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``use_keychain(backend)``: make ``backend`` keyring's for the rest of the test."""
    previous = keyring.get_keyring()

    def use(backend: keyring.backend.KeyringBackend) -> None:
        monkeypatch.setenv("MIRBADLLM_KEYRING", "os")
        keyring.set_keyring(backend)

    yield use
    keyring.set_keyring(previous)


def test_a_new_ca_key_is_encrypted_and_its_secret_is_in_the_keychain_only(
        keychain: MemoryKeychain, tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    key_file = tmp_path / "pki" / "ca.key"
    data = key_file.read_bytes()
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in data and not any(mark in data for mark in PLAIN_MARKS)
    assert _mode(key_file) == 0o600
    secret = keychain.entries[(SERVICE, account(key_file))]
    assert len(secret) == 64 and secret.encode() not in data
    assert _public(CertificateAuthority.load_or_create(tmp_path / "pki")) == _public(ca)  # the same CA again
    state = keys_at_rest(tmp_path / "pki", None)
    assert state.keychain and state.warning is None and state.backend and "MemoryKeychain" in state.backend


def test_an_encrypted_client_key_serves_tls_through_the_keychain_secret(keychain: MemoryKeychain,
                                                                        tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    key, cert = ensure_client_certificate(ca, tmp_path / "pki")
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in key.read_bytes()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    load_cert_chain(ctx, cert, key)  # no prompt, no error: the secret came from the keychain
    wrong = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with pytest.raises(ssl.SSLError):  # and it takes that secret: the file alone opens with nothing else
        wrong.load_cert_chain(str(cert), str(key), password="not-the-secret")


def test_a_plain_key_is_encrypted_in_place_on_first_start_with_a_keychain(
        monkeypatch: pytest.MonkeyPatch, use_keychain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIRBADLLM_KEYRING", "off")  # an older install: plain 0600 files
    before = CertificateAuthority.load_or_create(tmp_path / "pki")
    key_file = tmp_path / "pki" / "ca.key"
    assert b"BEGIN PRIVATE KEY" in key_file.read_bytes()
    assert "MIRBADLLM_KEYRING=off" in (keys_at_rest(tmp_path / "pki", None).warning or "")

    memory = MemoryKeychain()
    use_keychain(memory)
    after = CertificateAuthority.load_or_create(tmp_path / "pki")
    assert _public(after) == _public(before)  # the same CA: agents paired with it keep working
    data = key_file.read_bytes()
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in data and not any(mark in data for mark in PLAIN_MARKS)
    assert _mode(key_file) == 0o600 and (SERVICE, account(key_file)) in memory.entries
    assert sorted(p.name for p in key_file.parent.iterdir() if p.name.endswith(".tmp")) == []
    assert keys_at_rest(tmp_path / "pki", None).keychain


def test_the_status_answer_follows_the_key_files_while_the_daemon_runs(
        monkeypatch: pytest.MonkeyPatch, use_keychain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIRBADLLM_KEYRING", "off")
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    status_reads = KeysAtRestReader(tmp_path / "pki", None)  # what /api/status answers from, read once a call
    assert status_reads().plain_files == ["ca.key"] and status_reads().plain_files == ["ca.key"]
    ensure_client_certificate(ca, tmp_path / "pki")  # a key written meanwhile
    assert sorted(status_reads().plain_files) == ["ca.key", "daemon-client.key"]
    use_keychain(MemoryKeychain())
    CertificateAuthority.load_or_create(tmp_path / "pki")  # the CA key encrypted in place
    state = status_reads()
    assert not state.keychain and state.plain_files == ["daemon-client.key"]


def test_a_keychain_that_keeps_no_secret_leaves_the_plain_key_as_it_was(
        monkeypatch: pytest.MonkeyPatch, use_keychain, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIRBADLLM_KEYRING", "off")
    before = CertificateAuthority.load_or_create(tmp_path / "pki")
    plain = (tmp_path / "pki" / "ca.key").read_bytes()
    use_keychain(ForgetfulKeychain())
    after = CertificateAuthority.load_or_create(tmp_path / "pki")  # the secret did not stick: no migration
    assert _public(after) == _public(before) and (tmp_path / "pki" / "ca.key").read_bytes() == plain
    state = keys_at_rest(tmp_path / "pki", None)
    assert not state.keychain and "did not keep the secret" in (state.warning or "")


@pytest.mark.parametrize("backend", [fail.Keyring(), RefusingKeychain()], ids=["no-backend", "refusing"])
def test_without_a_usable_keychain_keys_are_0600_files_and_status_warns(
        use_keychain, backend: keyring.backend.KeyringBackend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    use_keychain(backend)
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    ensure_client_certificate(ca, tmp_path / "pki")
    for name in ("ca.key", "daemon-client.key"):
        path = tmp_path / "pki" / name
        assert b"BEGIN PRIVATE KEY" in path.read_bytes() and _mode(path) == 0o600
    state = keys_at_rest(tmp_path / "pki", None)
    assert not state.keychain and sorted(state.plain_files) == ["ca.key", "daemon-client.key"]
    assert state.warning is not None and "0600" in state.warning and "ca.key" in state.warning
    assert ("runs no keychain" if isinstance(backend, fail.Keyring) else "refused") in state.warning
    assert _public(CertificateAuthority.load_or_create(tmp_path / "pki")) == _public(ca)  # still loads


def test_a_vanished_keychain_secret_is_a_clear_error_and_never_a_new_ca(keychain: MemoryKeychain,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    CertificateAuthority.load_or_create(tmp_path / "pki")
    key_file = tmp_path / "pki" / "ca.key"
    kept, cert_kept = key_file.read_bytes(), (tmp_path / "pki" / "ca.crt").read_bytes()
    keychain.entries.clear()
    with pytest.raises(KeyStoreError) as gone:
        CertificateAuthority.load_or_create(tmp_path / "pki")
    message = str(gone.value)
    assert "no longer holds it" in message and str(key_file) in message and SERVICE in message
    assert "backup" in message
    assert key_file.read_bytes() == kept and (tmp_path / "pki" / "ca.crt").read_bytes() == cert_kept

    monkeypatch.setenv("MIRBADLLM_KEYRING", "off")  # the keychain switched off: said so, nothing replaced
    with pytest.raises(KeyStoreError, match="MIRBADLLM_KEYRING=off"):
        read_key(key_file)
    assert key_file.read_bytes() == kept


def test_a_replaced_keychain_secret_is_a_clear_error(keychain: MemoryKeychain, tmp_path: Path) -> None:
    CertificateAuthority.load_or_create(tmp_path / "pki")
    key_file = tmp_path / "pki" / "ca.key"
    keychain.entries[(SERVICE, account(key_file))] = "0" * 64
    with pytest.raises(KeyStoreError, match="does not open with the secret"):
        CertificateAuthority.load_or_create(tmp_path / "pki")


def test_half_a_ca_is_an_error_not_a_new_ca(tmp_path: Path) -> None:
    CertificateAuthority.load_or_create(tmp_path / "pki")
    (tmp_path / "pki" / "ca.crt").unlink()
    kept = (tmp_path / "pki" / "ca.key").read_bytes()
    with pytest.raises(KeyStoreError, match="ca.crt does not"):
        CertificateAuthority.load_or_create(tmp_path / "pki")
    assert (tmp_path / "pki" / "ca.key").read_bytes() == kept and not (tmp_path / "pki" / "ca.crt").exists()


def test_the_agent_key_is_encrypted_serves_tls_and_unpairing_forgets_its_secret(
        keychain: MemoryKeychain, tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    identity = load_or_create_identity(paths, "kappa")
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in paths.key_file.read_bytes()
    assert load_or_create_identity(paths).node_id == identity.node_id
    CertificateAuthority.load_or_create(tmp_path / "pki")
    paths.ca_file.write_bytes(read_ca_pem(tmp_path / "pki")[1])
    assert isinstance(server_ssl_context(load_or_create_identity(paths)), ssl.SSLContext)

    reset_identity(paths)
    assert not paths.key_file.exists() and (SERVICE, account(paths.key_file)) not in keychain.entries
    assert (SERVICE, account(tmp_path / "pki" / "ca.key")) in keychain.entries  # only its own secret


def test_an_agent_key_whose_secret_vanished_names_what_to_do(keychain: MemoryKeychain, tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    load_or_create_identity(paths, "kappa")
    keychain.entries.clear()
    with pytest.raises(IdentityError, match="pair the agent again"):
        load_or_create_identity(paths)
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in paths.key_file.read_bytes()  # not replaced by a new key


def test_the_ca_goes_out_as_pem_and_comes_back_encrypted(keychain: MemoryKeychain, tmp_path: Path) -> None:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    key_pem_bytes, cert_pem_bytes = read_ca_pem(tmp_path / "pki")
    assert b"BEGIN PRIVATE KEY" in key_pem_bytes and b"BEGIN CERTIFICATE" in cert_pem_bytes

    restored = install_ca_pem(tmp_path / "restored", key_pem_bytes, cert_pem_bytes)
    assert _public(restored) == _public(ca)
    assert b"BEGIN ENCRYPTED PRIVATE KEY" in (tmp_path / "restored" / "ca.key").read_bytes()
    assert _public(CertificateAuthority.load_or_create(tmp_path / "restored")) == _public(ca)

    other = CertificateAuthority.load_or_create(tmp_path / "other", name="Another CA")
    with pytest.raises(ValueError, match="does not belong"):
        install_ca_pem(tmp_path / "restored", key_pem(other.key), cert_pem_bytes)
    with pytest.raises(ValueError, match="not a PEM"):
        install_ca_pem(tmp_path / "restored", b"nonsense", cert_pem_bytes)
    assert _public(CertificateAuthority.load_or_create(tmp_path / "restored")) == _public(ca)  # untouched


def test_the_tests_default_is_no_keychain() -> None:
    """The suite never touches the real user keychain: tests/conftest.py sets MIRBADLLM_KEYRING=off."""
    assert os.environ["MIRBADLLM_KEYRING"] == "off"
    state = at_rest([])
    assert not state.keychain and "MIRBADLLM_KEYRING=off" in (state.warning or "")
