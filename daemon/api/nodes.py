"""Pydantic contracts of the nodes part of the admin API (``/api/nodes``).

A node is a machine with an agent. ``local`` is this machine's own agent; every other node has
the SHA-256 of its (daemon-signed) agent certificate as its id, and is reached at an address over
mutual TLS. Storage shapes (``nodes.json``) live in ``daemon.nodes.store``, not here.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from agent.api.backends import (
    CHOICES,
    Backend,
    BackendChoice,
    BackendState,
    Pick,
    pick_backend,
)
from agent.api.models import GpuInfo
from agent.api.runtimes import RuntimeOffer, profile
from core.key_store import KeysAtRest

# RuntimeOffer is re-exported: the app imports only daemon.api.
__all__ = ["NODE_ID_PATTERN", "DiscoveredNode", "NodeAddResult", "NodeAddressRequest", "NodePairRequest",
           "NodeState", "NodeView", "RuntimeOffer"]

NODE_ID_PATTERN = r"^(local|[0-9a-f]{64})$"


class NodeState(str, Enum):
    """What the node monitor last concluded."""

    UNKNOWN = "unknown"      # not probed yet
    ONLINE = "online"
    DEGRADED = "degraded"    # answers, but slowly, or missed a probe, or its instance feed fails
    OFFLINE = "offline"      # missed enough probes in a row; its models answer 503


PackStep = Literal["fetching", "installing", "installed", "failed", "off"]


class PackState(BaseModel):
    """Where a node's GPU runtime pack stands (``daemon.runtimes.packs``)."""

    platform: str = Field(description="The pack, as the release feed names it: llamacpp-cuda13-linux-x86_64.")
    state: PackStep
    message: str = Field(description="One line for the Nodes page and `ctl nodes show`.")
    at: float = Field(default_factory=time.time)


class NodeView(BaseModel):
    """A paired node (or this machine) as the Nodes page shows it."""

    id: str
    name: str
    local: bool = False
    address: str | None = Field(default=None, description="host:port of its agent; None for this machine")
    state: NodeState = NodeState.UNKNOWN
    reason: str | None = Field(default=None, description="Why it is degraded or offline.")
    hostname: str = ""
    os: str = ""
    arch: str = ""
    version: str = ""
    cpu_count: int | None = None
    cpu_percent: float | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    memory_available: int | None = Field(default=None, description="Bytes free for a new model.")
    gpus: list[GpuInfo] = Field(default_factory=list)
    runtimes: list[RuntimeOffer] = Field(default_factory=list, description="Each runtime its agent drives: "
                                         "available with its version, or why not (empty until it reports).")
    models: list[str] = Field(default_factory=list, description="Ids of the models placed on it.")
    latency_ms: float | None = Field(default=None, description="Round trip of the last status probe.")
    last_seen: float | None = None
    paired_at: float | None = None
    fingerprint: str | None = Field(default=None, description="The fingerprint compared while pairing.")
    keys_at_rest: KeysAtRest | None = Field(default=None, description="How its agent's key is stored (its "
                                            "status): in the keychain, or a 0600 file with a warning.")
    backend_choice: BackendChoice = Field(default="auto", description="The operator's choice for llama.cpp on this "
                                          "node: auto (the best backend that works), cuda, vulkan or cpu.")
    backend: Backend | None = Field(default=None, description="What a model started now computes on (None: the "
                                    "node has not said what its build can do).")
    backend_why: str | None = Field(default=None, description="Why not a better backend (or not the chosen one).")
    runtime_pack: PackState | None = Field(default=None, description="The GPU runtime pack this node could use "
                                           "(CUDA on an NVIDIA GPU): fetching, installed, or why not.")


class DiscoveredNode(BaseModel):
    """An agent waiting to be paired, seen on the LAN (mDNS) or added by address."""

    name: str
    address: str = Field(description="host:port to pair with")
    host: str
    port: int
    fingerprint: str = Field(description="SHA-256 of its self-signed certificate: compare it.")
    short_fingerprint: str = Field(description="What the agent prints: the first 20 hex digits.")
    version: str = ""
    hostname: str = ""
    source: Literal["mdns", "manual"] = "mdns"
    seen_at: float = 0.0


class NodeAddressRequest(BaseModel):
    """Look for an agent at an address (when multicast does not reach it)."""

    address: str = Field(min_length=1, max_length=255, description="host, host:port or [v6]:port")


class NodeAddResult(BaseModel):
    """What was at that address: an agent waiting to be paired, or a node already paired."""

    discovered: DiscoveredNode | None = None
    node: NodeView | None = None


class NodePairRequest(BaseModel):
    """Pair the agent at ``address``. The code is only used to compute a proof; it is never stored,
    sent or logged. ``fingerprint`` is the one the user compared with what the agent printed."""

    address: str = Field(min_length=1, max_length=255)
    code: SecretStr = Field(description="The agent's pairing code, e.g. ABCD-EFGH.")
    fingerprint: str = Field(pattern=r"^[0-9a-fA-F]{64}$")


# --- a node's backend: what a start there computes on, and which choice it can take (daemon.nodes.backends)

def llamacpp_offer(offers: list[RuntimeOffer] | None) -> RuntimeOffer | None:
    """The node's available llama.cpp build, the one whose backends a node's choice is about."""
    return next((o for o in offers or [] if profile(o.runtime).gpu_backends and o.available), None)


def llamacpp_backends(offers: list[RuntimeOffer] | None) -> list[BackendState] | None:
    """The backends of the node's llama.cpp build as it last reported them; None when not known."""
    offer = llamacpp_offer(offers)
    return list(offer.backends) if offer is not None else None


def refusal(node_id: str, choice: str, offers: list[RuntimeOffer] | None) -> tuple[int, str, str] | None:
    """Why ``choice`` cannot be kept for the node, as (status, code, message); None when it can.
    A GPU backend only where the node's build has it and it sees a device (422 naming what the node
    has); not while the node has not said (409). ``auto`` and ``cpu`` always can."""
    if choice not in ("cuda", "vulkan"):
        return None
    states = llamacpp_backends(offers)
    if states is None:
        return (409, "node_offline", (f"node '{node_id}' has not said which backends its llama.cpp build has (it is "
                "offline or not yet probed); choose auto or cpu, or try again once it answers"))
    state = next((s for s in states if s.backend.value == choice), None)
    if state is not None and state.available:
        return None
    have = "; ".join(
        f"{s.backend.label}: " + (", ".join(f"{d.name} {d.description} ({d.memory_total_mib} MiB)" for d in s.devices)
                                  or (s.reason or "no device"))
        for s in states if s.backend is not Backend.CPU) or "CPU only"
    why = state.reason if state is not None else f"its build has no {choice} backend"
    return (422, "backend_unavailable", (f"node '{node_id}' cannot compute on {choice}: {why}. The choices are "
            f"{', '.join(CHOICES)}; this node has {have}"))


def node_pick(choice: str, offers: list[RuntimeOffer] | None) -> Pick | None:
    """What a start on the node would compute on now; None while the node has not said."""
    states = llamacpp_backends(offers)
    if not states:
        return None
    return pick_backend(choice, states)
