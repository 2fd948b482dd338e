"""Contracts of "how it runs here": the ways one GGUF model can run on a node, each with its figures.

Spoken on ``/agent/v1/plan`` (body: ``agent.api.sources.FitRequest``; answer: ``NodePlan``) and
merged over the fleet by the daemon's ``POST /api/plan`` (``daemon.api.plan``). An option is a
placement (one GPU, the node's GPUs split by layers, part of the layers offloaded, the CPU, the
node's unified memory, or across nodes), the largest context that fits it, what each device
holds, and whether it fits in the memory free now or needs room made first. For a split across
nodes each node gives ``SplitFigures`` (what each layer takes at a ladder of contexts) and the
daemon works out the option (``daemon.sources.plan.across_nodes``). New fields are additive, with
defaults.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import GgufSummary, MemoryEstimate

PlanKind = Literal["gpu", "split", "partial", "cpu", "unified", "nodes"]
PlanState = Literal["free", "needs_room", "too_big", "unavailable"]
PLAN_KINDS: tuple[PlanKind, ...] = ("gpu", "split", "unified", "partial", "cpu", "nodes")  # preferred first
PLAN_STATES: tuple[PlanState, ...] = ("free", "needs_room", "too_big", "unavailable")  # best first
STATE_LABELS: dict[PlanState, str] = {"free": "free now", "needs_room": "needs room", "too_big": "too big",
                                      "unavailable": "not available yet"}


class DeviceUse(BaseModel):
    """What one device holds under an option, against what it has."""

    device: str = Field(description="cpu (system memory), or GPU N as the backend it computes on names it: "
                                    "VulkanN, CUDAN, MTLN.")
    gpu_index: int | None = None
    name: str = ""
    needed_bytes: int
    free_bytes: int = Field(description="Usable now: free memory less the reserve (and less what loads hold).")
    capacity_bytes: int = Field(description="Usable with nothing else on it: total less the reserve.")


class NodeShare(BaseModel):
    """One node's part of a model run across nodes (llama.cpp RPC): its layers and what they take."""

    node: str
    role: Literal["main", "helper"] = Field(description="main: runs llama-server (and holds what is not a layer); "
                                            "helper: an rpc-server holding layers.")
    layers: int = Field(description="Repeating layers it holds.")
    device: str = Field(description="Where they live: cpu (system memory) or gpus (its GPUs).")
    needed_bytes: int
    free_bytes: int
    capacity_bytes: int


class SplitFigures(BaseModel):
    """What a model takes at one context with its layers shared over nodes (the daemon splits them):
    each repeating layer's weights and KV cache, and the rest, held by the main node (token
    embeddings, output head, compute buffers, the runtime's overhead)."""

    ctx_size: int
    layer_bytes: list[int] = Field(default_factory=list)
    main_bytes: int = 0
    offload_bytes: int = Field(default=0, description="What goes to the devices with the offloaded layers once "
                               "any is (llama.cpp's compute buffer): the helpers' part beyond their layers; "
                               "0 from an older agent.")


class PlanOption(BaseModel):
    """One way to run the model."""

    kind: PlanKind
    label: str
    node: str = Field(default="", description="The node's id (set by the daemon).")
    gpus: list[int] = Field(default_factory=list, description="The GPUs it uses.")
    state: PlanState
    ctx_size: int = Field(description="The context these figures are for: the one asked, else the largest that fits.")
    max_ctx_size: int = Field(description="Largest context that fits in the memory free now (0: none).")
    max_ctx_size_empty: int = Field(description="Largest context that fits with the devices empty (0: none).")
    n_gpu_layers: int = 0
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings,
                                       description="The request's settings with this placement applied.")
    args: list[str] = Field(default_factory=list, description="The llama-server flags of this placement.")
    estimate: MemoryEstimate | None = None
    devices: list[DeviceUse] = Field(default_factory=list)
    message: str = ""
    # Across nodes (kind "nodes", set by the daemon): the helpers a definition names (rpc_nodes), each node's part.
    rpc_nodes: list[str] = Field(default_factory=list, description="The helper nodes' ids, in --rpc order.")
    shares: list[NodeShare] = Field(default_factory=list, description="Each node's layers and memory, main first.")


class NodePlan(BaseModel):
    """Every way the model runs on one node, best first."""

    node: str = ""
    source: str = ""
    summary: GgufSummary
    unified_memory: bool = False
    memory_total: int = 0
    memory_available: int = 0
    options: list[PlanOption] = Field(default_factory=list)
    split: list[SplitFigures] = Field(default_factory=list, description="The model's figures for a split over "
                                      "nodes at a ladder of contexts, smallest first (the one asked, when asked); "
                                      "empty: an agent that does not give them.")
