"""The wire contract of ``POST /agent/v1/trust``: the daemon hands a paired agent new trust (CA rotation).

Sent over the daemon's existing mutual-TLS connection, never over pairing: only the pinned daemon
certificate reaches it (``agent.rpc.peers``). The body names every CA the agent trusts from now on
(during a rotation's overlap the old and the new one, after it the new one alone), the agent's own
certificate from one of them (for the agent's existing key: the key never changes), and the daemon
client certificates the agent pins (none for this machine's own agent, which pins none). The agent
checks all of it before it writes a byte (422 ``bad_trust``), writes its identity files, then
serves every new handshake with them; connections already open keep theirs until they close.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

TRUST_PATH = "/trust"
MAX_TRUSTED_CAS = 4


class TrustUpdate(BaseModel):
    """What the agent trusts and presents from now on."""

    ca_pems: list[str] = Field(min_length=1, max_length=MAX_TRUSTED_CAS,
                               description="Every CA certificate (PEM) whose client certificates get in.")
    agent_cert_pem: str = Field(description="The agent's certificate (PEM), signed by one of ca_pems for the "
                                            "agent's own key; it becomes the node's certificate.")
    daemon_cert_pems: list[str] = Field(default_factory=list, max_length=MAX_TRUSTED_CAS,
                                        description="The daemon client certificates (PEM) the agent pins; empty "
                                                    "for an agent that pins none (this machine's own).")


class TrustInstalled(BaseModel):
    """The agent trusts what it was sent; its certificate's id is the one new handshakes show."""

    certificate_id: str = Field(description="SHA-256 (DER) of the agent's certificate now.")
    trusted_cas: int = Field(description="How many CAs the agent trusts now.")
