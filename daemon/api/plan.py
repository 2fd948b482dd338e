"""Contracts of ``POST /api/plan``: how one GGUF model can run across the fleet.

The daemon asks every online node's agent (``/agent/v1/plan``, ``agent.api.plan``) and merges the
answers (``daemon.sources.plan``): each node's options (a GPU, a layer split, a partial offload,
the CPU, unified memory) with the context that fits, what each device holds, and whether it fits
in the memory free now or needs room; the nodes that could not answer, with why; and the fleet's
own option: across nodes over llama.cpp's RPC when no node holds the model alone (each node's
layers and memory in ``PlanOption.shares``, the helpers a definition names in ``rpc_nodes``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agent.api.llamacpp import LlamaCppSettings
from agent.api.plan import (
    PLAN_KINDS,
    PLAN_STATES,
    STATE_LABELS,
    DeviceUse,
    NodePlan,
    NodeShare,
    PlanKind,
    PlanOption,
    PlanState,
    SplitFigures,
)
from agent.api.sources import GgufSummary, HfFileRef


class PlanQuery(BaseModel):
    """A model file (on the node, or a Hugging Face file read by its header) to plan for."""

    model_config = ConfigDict(extra="forbid")

    node: str | None = Field(default=None, max_length=200, description="One node; None: every online node.")
    model_path: str | None = None
    hf: HfFileRef | None = None
    ctx_size: int | None = Field(default=None, ge=256, le=4_194_304,
                                 description="Judge each option at this context; None: the largest that fits.")
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings,
                                       description="The other settings (parallel, cache types, ...) kept as given.")
    token: str | None = Field(default=None, description="Hugging Face token; sent to the hub only.")


class NodePlanError(BaseModel):
    node: str
    code: str
    message: str


class Plan(BaseModel):
    """Every way the model runs on the fleet: per node, best first, then the fleet's own options."""

    source: str = ""
    summary: GgufSummary | None = None
    nodes: list[NodePlan] = Field(default_factory=list)
    fleet: list[PlanOption] = Field(default_factory=list, description="Options across nodes.")
    errors: list[NodePlanError] = Field(default_factory=list, description="Nodes that gave no plan.")

    def options(self) -> list[PlanOption]:
        """Every option, each node's in its order, then the fleet's."""
        return [o for n in self.nodes for o in n.options] + list(self.fleet)

    def best(self) -> PlanOption | None:
        """The best option that fits now, else the best that fits once room is made."""
        for state in ("free", "needs_room"):
            found = [o for o in self.options() if o.state == state]
            if found:
                return min(found, key=lambda o: (PLAN_KINDS.index(o.kind), -o.max_ctx_size))
        return None


__all__ = ["PLAN_KINDS", "PLAN_STATES", "STATE_LABELS", "DeviceUse", "NodePlan", "NodePlanError", "NodeShare",
           "Plan", "PlanKind", "PlanOption", "PlanQuery", "PlanState", "SplitFigures"]
