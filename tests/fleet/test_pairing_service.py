"""The agent's pairing state machine, with a fake clock: codes, tries, expiry, one use, the proof."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.api.pairing import (
    CODE_ALPHABET,
    PairingComplete,
    format_code,
    new_code,
    normalize_code,
    pairing_proof,
    short_fingerprint,
    transcript,
)
from agent.identity import load_or_create_identity
from agent.pairing.enrollment import is_paired
from agent.pairing.service import PairingRefused, PairingService
from agent.paths import AgentPaths
from daemon.pki import CertificateAuthority, cert_pem, fingerprint


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Shown:
    codes: list[str] = field(default_factory=list)

    def __call__(self, code: str, _expires: float) -> None:
        self.codes.append(code)

    @property
    def current(self) -> str:
        return self.codes[-1]


@dataclass
class Daemon:
    """Just enough of a daemon to answer a challenge: a CA and its client certificate."""

    ca: CertificateAuthority
    client_pem: str

    last_transcript: bytes = b""

    def completion(self, service: PairingService, code: str, *, agent_fp: str | None = None,
                   ca: CertificateAuthority | None = None) -> PairingComplete:
        challenge = service.challenge()
        signer = ca or self.ca
        signed = cert_pem(signer.sign_csr(challenge.csr_pem.encode())).decode()
        ca_pem = cert_pem(signer.cert).decode()
        nonce = secrets.token_hex(32)
        data = transcript(agent_fp or service.fingerprint, challenge.agent_nonce, nonce, ca_pem,
                          self.client_pem, signed)
        self.last_transcript = data
        return PairingComplete(challenge_id=challenge.challenge_id, daemon_nonce=nonce, ca_pem=ca_pem,
                               client_cert_pem=self.client_pem, agent_cert_pem=signed,
                               proof=pairing_proof(code, "daemon", data))


@pytest.fixture
def daemon(tmp_path: Path) -> Daemon:
    ca = CertificateAuthority.load_or_create(tmp_path / "pki")
    _, cert = ca.issue_keypair(tmp_path / "pki", "daemon-client", "mirbadllm-daemon", server=False, client=True)
    return Daemon(ca, cert.read_text())


@pytest.fixture
def setup(tmp_path: Path) -> tuple[PairingService, Clock, Shown, AgentPaths]:
    paths = AgentPaths(tmp_path / "agent").ensure()
    clock, shown = Clock(), Shown()
    service = PairingService(load_or_create_identity(paths, common_name="box"), "box", "1.0",
                             on_code=shown, clock=clock)
    service.announce()
    return service, clock, shown, paths


def test_codes_are_eight_unambiguous_characters_and_read_back_loosely() -> None:
    codes = {new_code() for _ in range(200)}
    assert len(codes) == 200
    assert all(len(c) == 8 and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert not set("01ILOUV") & set(CODE_ALPHABET)
    assert format_code("ABCDEFGH") == "ABCD-EFGH"
    assert normalize_code(" abcd-efgh ") == "ABCDEFGH"
    for bad in ("ABCD-EFG", "ABCD-EFGH1", "ABCD-EFG0"):
        with pytest.raises(ValueError, match="8 characters"):
            normalize_code(bad)
    assert short_fingerprint("ab" * 32) == "ABAB-ABAB-ABAB-ABAB-ABAB"


def test_the_right_code_pairs_once_and_the_agent_confirms(setup, daemon: Daemon) -> None:  # type: ignore[no-untyped-def]
    service, _clock, shown, paths = setup
    request = daemon.completion(service, shown.current.lower())  # typed in lower case: still right
    result = service.complete(request)
    assert is_paired(paths)
    identity = load_or_create_identity(paths)
    assert result.node_id == identity.node_id == fingerprint(identity.cert)
    assert identity.ca_cert == daemon.ca.cert and not identity.self_signed
    assert result.confirmation == pairing_proof(shown.current, "agent", daemon.last_transcript)
    assert result.confirmation != pairing_proof(shown.current, "daemon", daemon.last_transcript)
    with pytest.raises(PairingRefused) as reused:
        service.complete(request)  # the same code, again
    assert (reused.value.status, reused.value.code) == (410, "code_used")
    with pytest.raises(PairingRefused, match="already paired"):
        service.challenge()


def test_five_wrong_codes_retire_the_code_and_show_a_new_one(setup, daemon: Daemon) -> None:  # type: ignore[no-untyped-def]
    service, _clock, shown, paths = setup
    first = shown.current
    wrong = format_code("".join("A" if c != "A" else "B" for c in normalize_code(first)))
    messages = []
    for _ in range(5):
        with pytest.raises(PairingRefused) as refused:
            service.complete(daemon.completion(service, wrong))
        assert (refused.value.status, refused.value.code) == (403, "wrong_code")
        messages.append(refused.value.message)
    assert messages[:4] == [f"Wrong pairing code ({n} {'try' if n == 1 else 'tries'} left)." for n in (4, 3, 2, 1)]
    assert "new code" in messages[4]
    assert len(shown.codes) == 2 and shown.current != first and not is_paired(paths)
    with pytest.raises(PairingRefused, match="Wrong pairing code"):  # the retired code is dead
        service.complete(daemon.completion(service, first))
    service.complete(daemon.completion(service, shown.current))
    assert is_paired(paths)


def test_a_code_expires_after_ten_minutes(setup, daemon: Daemon) -> None:  # type: ignore[no-untyped-def]
    service, clock, shown, _paths = setup
    old = shown.current
    clock.now += 599
    assert not service.rotate_if_due() and service.expires_in_s == pytest.approx(1)
    request = daemon.completion(service, old)
    clock.now += 2
    with pytest.raises(PairingRefused) as expired:
        service.complete(request)
    assert (expired.value.status, expired.value.code) == (410, "code_expired")
    assert shown.current != old and service.expires_in_s == pytest.approx(600)


def test_a_challenge_is_single_use_and_short_lived(setup, daemon: Daemon) -> None:  # type: ignore[no-untyped-def]
    service, clock, shown, _paths = setup
    request = daemon.completion(service, shown.current)
    clock.now += 61
    with pytest.raises(PairingRefused) as stale:
        service.complete(request)
    assert (stale.value.status, stale.value.code) == (409, "challenge_expired")
    assert len(shown.codes) == 1  # a stale challenge costs no try and no code


def test_a_proof_for_another_certificate_fails_a_man_in_the_middle(setup, daemon: Daemon) -> None:  # type: ignore[no-untyped-def]
    """A daemon that was shown an impostor's certificate proves the code for that fingerprint:
    relayed to the genuine agent, the proof does not verify."""
    service, _clock, shown, paths = setup
    with pytest.raises(PairingRefused, match="Wrong pairing code"):
        service.complete(daemon.completion(service, shown.current, agent_fp="ee" * 32))
    assert not is_paired(paths)


def test_certificates_from_a_mismatched_ca_are_refused_without_spending_a_try(setup, daemon: Daemon,  # type: ignore[no-untyped-def]
                                                                               tmp_path: Path) -> None:
    service, _clock, shown, paths = setup
    other = CertificateAuthority.load_or_create(tmp_path / "other-pki", name="Other CA")
    with pytest.raises(PairingRefused) as refused:  # the daemon's client cert is not from this CA
        service.complete(daemon.completion(service, shown.current, ca=other))
    assert (refused.value.status, refused.value.code) == (422, "bad_certificates")
    assert not is_paired(paths) and len(shown.codes) == 1
    service.complete(daemon.completion(service, shown.current))
    assert is_paired(paths)
