"""The agent's side of pairing: the code it shows, the challenges it hands out, the proof it checks.

A code is 8 characters from an unambiguous alphabet, valid 10 minutes and for one pairing; the 5th
wrong proof retires it and a new one is shown. Challenges are single-use and live 60 seconds. The
code never leaves this object except through ``on_code`` (the console) and is never logged.
See ``agent.api.pairing`` for the protocol.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization

from agent.api.pairing import (
    CODE_TTL_S,
    MAX_WRONG_TRIES,
    PairingChallenge,
    PairingComplete,
    PairingInfo,
    PairingResult,
    format_code,
    new_code,
    pairing_proof,
    proofs_equal,
    transcript,
)
from agent.identity import AgentIdentity, IdentityError, make_csr
from agent.pairing.enrollment import install_enrollment
from agent.problems import AgentProblem

_LOGGER = logging.getLogger(__name__)

CHALLENGE_TTL_S = 60.0
MAX_CHALLENGES = 32


class PairingRefused(AgentProblem):
    """A pairing step was refused; ``status`` and ``code`` go on the wire as the error envelope."""


@dataclass
class _Code:
    value: str
    issued_at: float
    wrong: int = 0
    used: bool = False


@dataclass(frozen=True)
class _Challenge:
    nonce: str
    issued_at: float


class PairingService:
    """One unpaired agent's pairing state. ``on_code(code, expires_in_s)`` shows each new code."""

    def __init__(self, identity: AgentIdentity, name: str, version: str, *,
                 on_code: Callable[[str, float], None] = lambda _c, _t: None,
                 clock: Callable[[], float] = time.monotonic, ttl_s: float = CODE_TTL_S,
                 max_wrong: int = MAX_WRONG_TRIES) -> None:
        self.identity = identity
        self.name = name
        self.version = version
        self._on_code = on_code
        self._clock = clock
        self._ttl = ttl_s
        self._max_wrong = max_wrong
        self._challenges: OrderedDict[str, _Challenge] = OrderedDict()
        self._csr = make_csr(identity, name).decode()
        self.paired: PairingResult | None = None
        self._code = _Code(new_code(), self._clock())

    # --- the code ----------------------------------------------------------------------------
    def announce(self) -> None:
        """Show the current code (the first one is shown once the agent listens)."""
        self._on_code(format_code(self._code.value), self.expires_in_s)

    def _issue(self, reason: str) -> _Code:
        self._code = _Code(new_code(), self._clock())
        _LOGGER.info("new pairing code (%s)", reason)  # the code itself is only shown, never logged
        self.announce()
        return self._code

    @property
    def expires_in_s(self) -> float:
        return max(0.0, self._code.issued_at + self._ttl - self._clock())

    def rotate_if_due(self) -> bool:
        """Replace an expired code (while not yet paired); True when a new one was issued."""
        if self.paired is None and self.expires_in_s <= 0:
            self._issue("the previous one expired")
            return True
        return False

    async def run(self) -> None:
        """Show a new code whenever the current one expires, until cancelled."""
        while True:
            await asyncio.sleep(max(self.expires_in_s, 0.5))
            self.rotate_if_due()

    # --- the protocol --------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        return self.identity.node_id

    def info(self) -> PairingInfo:
        cert = self.identity.cert.public_bytes(serialization.Encoding.PEM).decode()
        return PairingInfo(name=self.name, hostname=socket.gethostname(), os=platform.system(),
                           version=self.version, fingerprint=self.fingerprint, certificate_pem=cert,
                           code_expires_in_s=self.expires_in_s)

    def challenge(self) -> PairingChallenge:
        self._refuse_when_closed()
        now = self._clock()
        self._drop_stale(now)
        while len(self._challenges) >= MAX_CHALLENGES:
            self._challenges.popitem(last=False)
        challenge_id = secrets.token_hex(16)
        self._challenges[challenge_id] = _Challenge(secrets.token_hex(32), now)
        return PairingChallenge(challenge_id=challenge_id, agent_nonce=self._challenges[challenge_id].nonce,
                                csr_pem=self._csr, expires_in_s=CHALLENGE_TTL_S)

    def complete(self, request: PairingComplete) -> PairingResult:
        """Check the daemon's proof; on success install what it sent and answer with ours."""
        self._refuse_when_closed()
        self._drop_stale(self._clock())
        challenge = self._challenges.pop(request.challenge_id, None)
        if challenge is None:
            raise PairingRefused("That pairing attempt expired; start again.", status=409, code="challenge_expired")
        if self.rotate_if_due():
            raise PairingRefused("The pairing code expired; the agent shows a new one.", status=410,
                                 code="code_expired")
        data = transcript(self.fingerprint, challenge.nonce, request.daemon_nonce, request.ca_pem,
                          request.client_cert_pem, request.agent_cert_pem)
        code = self._code
        if not proofs_equal(request.proof, pairing_proof(code.value, "daemon", data)):
            code.wrong += 1
            left = self._max_wrong - code.wrong
            _LOGGER.warning("wrong pairing code (%d of %d tries)", code.wrong, self._max_wrong)
            if left <= 0:
                self._issue(f"{self._max_wrong} wrong tries")
                raise PairingRefused(f"Wrong pairing code, {self._max_wrong} times: the agent retired it and "
                                     "shows a new code.", status=403, code="wrong_code")
            raise PairingRefused(f"Wrong pairing code ({left} {'try' if left == 1 else 'tries'} left).",
                                 status=403, code="wrong_code")
        try:
            identity = install_enrollment(self.identity.paths, request.ca_pem, request.agent_cert_pem,
                                          request.client_cert_pem)
        except IdentityError as exc:  # the right daemon sent unusable certificates: no try spent
            raise PairingRefused(str(exc), status=422, code="bad_certificates") from exc
        code.used = True
        self.paired = PairingResult(node_id=identity.node_id,
                                    confirmation=pairing_proof(code.value, "agent", data))
        _LOGGER.info("paired: node id %s", identity.node_id)
        return self.paired

    def _refuse_when_closed(self) -> None:
        if self.paired is not None or self._code.used:
            raise PairingRefused("This agent is already paired; its code was used.", status=410, code="code_used")

    def _drop_stale(self, now: float) -> None:
        for challenge_id, challenge in list(self._challenges.items()):
            if now - challenge.issued_at > CHALLENGE_TTL_S:
                del self._challenges[challenge_id]
