"""Pairing: the contracts, the proof both sides compute, and the typed client of an unpaired agent.

An agent that no CA has enrolled serves only ``/agent/v1/pairing`` over TLS 1.3 with its
self-signed certificate, advertises itself as ``_mirbadllm._tcp`` and shows a pairing code.

    GET  /pairing            -> PairingInfo       # who the agent is (its certificate, fingerprint)
    POST /pairing/challenge  -> PairingChallenge  # a fresh agent nonce and the agent's CSR
    POST /pairing/complete   -> PairingResult     # body: PairingComplete (the daemon's proof)

The code is never sent. The daemon pins the agent's self-signed certificate by the fingerprint
the user compared, then proves it knows the code with an HMAC keyed by the code over a transcript
that binds that fingerprint, both nonces and the three certificates it hands over (CA, the
daemon's client certificate, the agent's newly signed certificate). Only after the agent has
checked that proof does it answer with its own HMAC (role ``agent``) as key confirmation, so an
agent never gives an unproven caller anything to guess the code against offline.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

import aiohttp
from pydantic import BaseModel, Field

from agent.api.client import AgentError
from agent.api.models import API_PREFIX

SERVICE_TYPE = "_mirbadllm._tcp.local."
PROTOCOL = b"mirbadllm-pair-v1"
# No 0/O, 1/I/L or U/V look-alikes: a code read aloud or off a screen is typed right the first time.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL_S = 600.0
MAX_WRONG_TRIES = 5
FINGERPRINT_PATTERN = r"^[0-9a-f]{64}$"
# The daemon's client certificate, pinned by the agent at pairing, under ``identity/``.
IDENTITY_DAEMON_FILE = "daemon.crt"

_CALL_TIMEOUT = aiohttp.ClientTimeout(total=15, connect=10)


class PairingInfo(BaseModel):
    """What an unpaired agent says about itself (public)."""

    name: str
    hostname: str = ""
    os: str = ""
    version: str = ""
    fingerprint: str = Field(description="SHA-256 of the agent's self-signed certificate (DER), hex.")
    certificate_pem: str
    code_expires_in_s: float = 0.0


class PairingChallenge(BaseModel):
    challenge_id: str
    agent_nonce: str = Field(description="32 random bytes, hex; valid for one completion.")
    csr_pem: str = Field(description="Certificate request for the agent's own key.")
    expires_in_s: float


class PairingComplete(BaseModel):
    challenge_id: str
    daemon_nonce: str = Field(pattern=r"^[0-9a-f]{64}$")
    ca_pem: str
    client_cert_pem: str = Field(description="The daemon's client certificate: the only client let in.")
    agent_cert_pem: str = Field(description="The agent's certificate, signed from its CSR.")
    proof: str = Field(description="HMAC-SHA256 keyed by the code over the transcript, role 'daemon'.")


class PairingResult(BaseModel):
    node_id: str = Field(description="SHA-256 of the signed agent certificate: the node's id from now on.")
    confirmation: str = Field(description="HMAC-SHA256 keyed by the code over the transcript, role 'agent'.")


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """``abcd-efgh`` → ``ABCDEFGH``; ValueError when it cannot be a pairing code."""
    code = "".join(ch for ch in text.upper() if ch not in " -_\t")
    if len(code) != CODE_LENGTH or any(ch not in CODE_ALPHABET for ch in code):
        raise ValueError(f"a pairing code is {CODE_LENGTH} characters from {CODE_ALPHABET}, "
                         "as the agent prints it (e.g. ABCD-EFGH)")
    return code


def format_code(code: str) -> str:
    half = CODE_LENGTH // 2
    return f"{code[:half]}-{code[half:]}"


def short_fingerprint(fingerprint: str, groups: int = 5) -> str:
    """The first ``groups`` × 4 hex digits, upper case, in groups: what a person compares."""
    fp = fingerprint.upper()
    return "-".join(fp[i:i + 4] for i in range(0, groups * 4, 4))


def _part(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def transcript(agent_fingerprint: str, agent_nonce: str, daemon_nonce: str, ca_pem: str,
               client_cert_pem: str, agent_cert_pem: str) -> bytes:
    """Everything a proof vouches for, each part length-prefixed so no two transcripts collide."""
    parts = [PROTOCOL, agent_fingerprint.lower().encode(), bytes.fromhex(agent_nonce),
             bytes.fromhex(daemon_nonce)]
    parts += [hashlib.sha256(pem.encode()).digest() for pem in (ca_pem, client_cert_pem, agent_cert_pem)]
    return b"".join(_part(p) for p in parts)


def pairing_proof(code: str, role: str, data: bytes) -> str:
    """HMAC-SHA256 keyed by the normalized code over ``role`` and the transcript, hex."""
    key = normalize_code(code).encode()
    return hmac.new(key, role.encode() + b"\x00" + data, hashlib.sha256).hexdigest()


def proofs_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class PairingClient:
    """Talks to an unpaired agent whose certificate has the SHA-256 ``fingerprint`` (pinned)."""

    def __init__(self, base_url: str, fingerprint: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.fingerprint = fingerprint.lower()
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            pin = aiohttp.Fingerprint(bytes.fromhex(self.fingerprint))
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pin))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.base_url}{API_PREFIX}{path}"
        try:
            async with self.session.request(method, url, json=body, timeout=_CALL_TIMEOUT) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    try:
                        err = json.loads(text)["error"]
                        raise AgentError(resp.status, str(err["code"]), str(err["message"]))
                    except (ValueError, KeyError, TypeError):
                        raise AgentError(resp.status, "error", text[:300]) from None
                return json.loads(text)
        except aiohttp.ServerFingerprintMismatch as exc:
            raise AgentError(0, "fingerprint_mismatch",
                             f"{self.base_url} presented a certificate with another fingerprint") from exc
        except aiohttp.ClientError as exc:
            raise AgentError(0, "unreachable", f"{self.base_url}: {exc}") from exc
        except TimeoutError as exc:
            raise AgentError(0, "timeout", f"{self.base_url}: no answer in time") from exc

    async def info(self) -> PairingInfo:
        return PairingInfo.model_validate(await self._call("GET", "/pairing"))

    async def challenge(self) -> PairingChallenge:
        return PairingChallenge.model_validate(await self._call("POST", "/pairing/challenge", {}))

    async def complete(self, request: PairingComplete) -> PairingResult:
        data = await self._call("POST", "/pairing/complete", request.model_dump(mode="json"))
        return PairingResult.model_validate(data)
