"""The contract of ``POST /api/nodes/ca-rotation``: the daemon's CA is replaced by a new one.

A new CA is made; every online node (and this machine's agent) is handed a certificate from it
while both CAs are trusted on both sides; then the old CA is retired: removed from every agent's
trust, the daemon's own client certificate issued again from the new CA. A node offline meanwhile
keeps its old certificate, which nothing trusts afterwards: it is named in ``offline``, and is
paired again (``mirbadllm agent --unpair`` there, remove it here, pair it). When a node that
answered fails its switch, nothing is retired (``retired`` false, ``problem`` says why); asking
again resumes with the same new CA. Refused with 409 ``ca_rotation_running`` while one runs and
409 ``pairing_in_progress`` while a node is being paired; nothing changes then.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

NodeRotationOutcome = Literal["rotated", "offline", "failed"]


class NodeRotation(BaseModel):
    """One node's part of a CA rotation."""

    node: str = Field(description="The node's id (it keeps it: the id is the certificate it was paired with).")
    name: str
    outcome: NodeRotationOutcome = Field(description="rotated: it trusts the new CA alone and holds a "
                                                     "certificate from it; offline: not reached, pair it again; "
                                                     "failed: it answered but did not switch (see message).")
    message: str = ""
    certificate_id: str | None = Field(default=None, description="SHA-256 (DER) of its new certificate.")
    seconds: float = Field(default=0.0, description="How long this node's switch took.")


class CaRotationResult(BaseModel):
    """What a CA rotation did, node by node."""

    old_ca: str = Field(description="SHA-256 (DER) of the CA that was active when the rotation began.")
    new_ca: str = Field(description="SHA-256 (DER) of the new CA.")
    retired: bool = Field(description="True: the old CA is trusted nowhere any more and the new one is the "
                                      "daemon's CA. False: the old CA is still trusted and in use.")
    problem: str | None = Field(default=None, description="Why the old CA was not retired.")
    nodes: list[NodeRotation] = Field(default_factory=list)
    offline: list[str] = Field(default_factory=list, description="Names of the nodes that were not reached: "
                                                                 "pair them again.")
    seconds: float = Field(default=0.0, description="How long the whole rotation took.")
