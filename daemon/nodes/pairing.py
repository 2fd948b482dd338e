"""The daemon's side of pairing, and looking at whatever answers at an address.

``pair`` runs the protocol of ``agent.api.pairing`` against an agent whose self-signed certificate
the user compared (``expected_fingerprint``): the TLS connection is pinned to it, the CSR must be
for that certificate's key, the daemon's proof goes first and the agent's key confirmation is
checked before the node is trusted. The code is an argument and nothing else: it is not stored,
not logged and not part of any error message.

``probe`` says what an address holds: an agent waiting to be paired, one of our nodes, a node this
daemon removed (its certificate is ours but no longer pinned: refused), or something else.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import ssl
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agent.api.client import AgentError
from agent.api.pairing import (
    PairingClient,
    PairingComplete,
    PairingInfo,
    normalize_code,
    pairing_proof,
    proofs_equal,
    transcript,
)
from core.key_store import load_cert_chain
from daemon.errors import DaemonProblem
from daemon.nodes.agent_errors import agent_problem
from daemon.nodes.store import format_address, issued_by
from daemon.pki import CertificateAuthority, cert_pem, fingerprint

PROBE_TIMEOUT_S = 8.0
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


class PairingFailed(DaemonProblem):
    """Pairing or probing failed; it becomes the API's error."""


@dataclass(frozen=True)
class Paired:
    """What a successful pairing yields, for the node record."""

    node_id: str
    certificate_pem: str
    info: PairingInfo


@dataclass(frozen=True)
class Probe:
    kind: Literal["unpaired", "ours", "removed", "foreign"]
    fingerprint: str
    certificate_pem: str
    info: PairingInfo | None = None


async def peer_certificate(host: str, port: int, client: tuple[str, str] | None,
                           timeout: float = PROBE_TIMEOUT_S) -> bytes:
    """The DER certificate the TLS server at host:port presents (nothing is verified here)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if client is not None:
        load_cert_chain(ctx, client[0], client[1])  # the key may be encrypted (core.key_store)
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), timeout)
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        raise PairingFailed(502, "node_unreachable",
                            f"No MirbadLLM agent answers at {format_address(host, port)}: {exc or type(exc).__name__}") from exc
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    if not der:
        raise PairingFailed(502, "node_unreachable", f"{format_address(host, port)} presented no certificate")
    return bytes(der)


async def probe(host: str, port: int, ca: CertificateAuthority, known: set[str],
                client: tuple[str, str]) -> Probe:
    der = await peer_certificate(host, port, client)
    fp = hashlib.sha256(der).hexdigest()
    pem = cert_pem(x509.load_der_x509_certificate(der)).decode()
    if fp in known:
        return Probe("ours", fp, pem)
    pairing = PairingClient(f"https://{format_address(host, port)}", fp)
    try:
        info = await pairing.info()
        if info.fingerprint != fp:
            raise PairingFailed(502, "fingerprint_mismatch", "The agent reports a fingerprint other than "
                                "its certificate's; it is not a genuine MirbadLLM agent.")
        return Probe("unpaired", fp, pem, info)
    except AgentError:
        return Probe("removed" if issued_by(pem, ca.cert) else "foreign", fp, pem)
    finally:
        await pairing.close()


def _check_csr(csr_pem: str, agent_cert_pem: str) -> None:
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    cert = x509.load_pem_x509_certificate(agent_cert_pem.encode())
    if not csr.is_signature_valid or csr.public_key().public_bytes(*_SPKI) != cert.public_key().public_bytes(*_SPKI):
        raise PairingFailed(502, "bad_csr", "The agent asked to sign a key other than its certificate's; "
                            "pairing refused.")


async def pair(host: str, port: int, code: str, expected_fingerprint: str, ca: CertificateAuthority,
               client_cert_pem: str) -> Paired:
    """Pair the agent at host:port; PairingFailed says what went wrong (never with the code)."""
    try:
        normalize_code(code)
    except ValueError as exc:
        raise PairingFailed(422, "invalid_code", str(exc)) from exc
    expected = expected_fingerprint.lower()
    client = PairingClient(f"https://{format_address(host, port)}", expected)
    try:
        info = await client.info()
        cert_fp = fingerprint(x509.load_pem_x509_certificate(info.certificate_pem.encode()))
        if cert_fp != expected or info.fingerprint != expected:
            raise PairingFailed(409, "fingerprint_mismatch", "The agent's certificate does not match the "
                                "fingerprint you compared; pairing refused.")
        challenge = await client.challenge()
        _check_csr(challenge.csr_pem, info.certificate_pem)
        signed = cert_pem(ca.sign_csr(challenge.csr_pem.encode())).decode()
        ca_text = cert_pem(ca.cert).decode()
        daemon_nonce = secrets.token_hex(32)
        data = transcript(expected, challenge.agent_nonce, daemon_nonce, ca_text, client_cert_pem, signed)
        result = await client.complete(PairingComplete(
            challenge_id=challenge.challenge_id, daemon_nonce=daemon_nonce, ca_pem=ca_text,
            client_cert_pem=client_cert_pem, agent_cert_pem=signed,
            proof=pairing_proof(code, "daemon", data)))
    except AgentError as exc:
        raise _failure(exc, host, port) from exc
    finally:
        await client.close()
    if not proofs_equal(result.confirmation, pairing_proof(code, "agent", data)):
        raise PairingFailed(502, "agent_proof_failed", "The agent accepted but could not prove it knows the "
                            "code; it is not trusted. Run `mirbadllm agent --unpair` on it and pair again.")
    node_id = fingerprint(x509.load_pem_x509_certificate(signed.encode()))
    if result.node_id != node_id:
        raise PairingFailed(502, "node_id_mismatch", "The agent installed another certificate than the one "
                            "signed for it; it is not trusted.")
    return Paired(node_id=node_id, certificate_pem=signed, info=info)


def _failure(exc: AgentError, host: str, port: int) -> PairingFailed:
    where = format_address(host, port)
    if exc.code == "fingerprint_mismatch":
        return PairingFailed(409, "fingerprint_mismatch", f"The agent at {where} presented another "
                             "certificate than the one you compared; pairing refused.")
    if exc.status == 0:
        return PairingFailed(502, "node_unreachable", f"No agent waiting to be paired answers at {where} "
                             f"({exc.code}). Is it running, and not paired already?")
    if exc.status == 404:
        return PairingFailed(409, "not_pairing", f"The agent at {where} is not waiting to be paired.")
    return agent_problem(exc, PairingFailed)  # 403 wrong_code, 409 challenge_expired, 410 code_used, ...
