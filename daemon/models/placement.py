"""Making room on a node for a model loaded on demand: which loaded models to unload, or why none can.

Pure functions over typed inputs; the orchestrator gathers the figures and acts on the plan.

A node's room for one more model is the smaller of two figures: what the machine has free now (its
latest telemetry sample's available memory, less the agent's reserve) and what the loaded models
have not claimed (its total memory, less the reserve, less each loaded model's claim: its
``memory_budget_gib`` when it has one, else the system and GPU memory it was measured using). A model needs its
budget, else the agent's estimate from its GGUF header. When the need is larger than the room, the
shortfall is made up by unloading loaded models of the same node, in this order: the lowest class
first (opportunistic, then standard, then critical), and within a class the least recently used
first. A model is never unloaded when it has requests in flight or waiting, when it is pinned,
when its class is higher than the class of the model that wants the room (a model may unload
models of its own class or lower, so critical is never unloaded for standard or opportunistic),
or when its size is not known (unloading it could not be counted on). Nothing is unloaded in
vain: when all the models that may go would not free enough, the plan unloads none and says what
is using the memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ModelClass = Literal["critical", "standard", "opportunistic"]
CLASS_RANK: dict[str, int] = {"opportunistic": 0, "standard": 1, "critical": 2}
GiB = 1 << 30
DEFAULT_RESERVE = GiB  # the agent's default --memory-reserve


def gib(value: int) -> str:
    return f"{value / GiB:.2f} GiB"


@dataclass(frozen=True)
class Loaded:
    """A model loaded (or loading) on the node."""

    model_id: str
    size_bytes: int | None  # what it holds or claims; None when not known
    last_used: float
    in_flight: int = 0
    pinned: bool = False
    model_class: ModelClass = "standard"

    def why_kept(self, for_class: ModelClass) -> str | None:
        """Why this model may not be unloaded for a model of ``for_class``; None when it may."""
        if self.in_flight > 0:
            return f"{self.in_flight} request{'s' if self.in_flight != 1 else ''} in flight"
        if self.pinned:
            return "pinned"
        if CLASS_RANK[self.model_class] > CLASS_RANK[for_class]:
            return f"class {self.model_class}, above {for_class}"
        if self.size_bytes is None:
            return "size not known"
        return None


@dataclass(frozen=True)
class NodeMemory:
    total: int
    available: int
    reserve: int = DEFAULT_RESERVE


@dataclass(frozen=True)
class Plan:
    """``evict`` in order; ``fits`` False means nothing is unloaded and ``reason`` says why."""

    fits: bool
    need: int
    room: int
    evict: tuple[Loaded, ...] = ()
    reason: str = ""
    freed: int = 0


def room(memory: NodeMemory, loaded: Sequence[Loaded]) -> int:
    """What one more model may take on this node now (negative when already over)."""
    claimed = sum(model.size_bytes or 0 for model in loaded)
    return min(memory.available - memory.reserve, memory.total - memory.reserve - claimed)


def eviction_order(loaded: Sequence[Loaded]) -> list[Loaded]:
    """Lowest class first, then least recently used first (ties by id, so the order is stable)."""
    return sorted(loaded, key=lambda m: (CLASS_RANK[m.model_class], m.last_used, m.model_id))


def plan(need: int, memory: NodeMemory, loaded: Sequence[Loaded], for_class: ModelClass = "standard",
         shortfall: int | None = None) -> Plan:
    """Which of ``loaded`` to unload so that a model needing ``need`` bytes fits.

    ``shortfall`` replaces the computed one (the agent refused a start and said by how much)."""
    have = room(memory, loaded)
    short = need - have if shortfall is None else shortfall
    if short <= 0:
        return Plan(fits=True, need=need, room=have)
    chosen: list[Loaded] = []
    freed = 0
    for model in eviction_order(loaded):
        if model.why_kept(for_class) is not None:
            continue
        chosen.append(model)
        freed += model.size_bytes or 0
        if freed >= short:
            return Plan(fits=True, need=need, room=have, evict=tuple(chosen), freed=freed)
    return Plan(fits=False, need=need, room=have, reason=_cannot(need, have, short, loaded, for_class))


def _cannot(need: int, have: int, short: int, loaded: Sequence[Loaded], for_class: ModelClass) -> str:
    text = f"needs {gib(need)}, {gib(max(have, 0))} free; unloading every model that may go would not free " \
           f"the {gib(short)} missing"
    if not loaded:
        return text + "; no model is loaded on the node"
    parts = []
    for model in eviction_order(loaded):
        size = gib(model.size_bytes) if model.size_bytes is not None else "size not known"
        kept = model.why_kept(for_class)
        parts.append(f"{model.model_id} ({size}{', ' + kept if kept else ''})")
    return text + "; in use: " + ", ".join(parts)


cannot_free = _cannot  # the refusal's words, for daemon.models.split_room


def shortfall_from_refusal(details: dict[str, object] | None) -> int | None:
    """By how much an agent's ``insufficient_memory`` refusal says the model misses (host or any GPU)."""
    if not details:
        return None

    def number(key: str) -> int:
        value = details.get(key)
        return int(value) if isinstance(value, int | float) else 0

    host = number("needed_bytes") - (number("available_bytes") - number("reserve_bytes") - number("pending_bytes"))
    gpu_need, gpu_budget = details.get("gpu_needed_bytes"), details.get("gpu_budget_bytes")
    gpu = 0
    if isinstance(gpu_need, list) and isinstance(gpu_budget, list):
        gpu = max((int(n) - int(b) for n, b in zip(gpu_need, gpu_budget, strict=False)), default=0)
    short = max(host, gpu)
    return short if short > 0 else None


# --- node "auto": where a model goes --------------------------------------------------------------


@dataclass(frozen=True)
class NodeOption:
    """One node a model placed ``node: "auto"`` could start on: the plan there, and its GPUs' free memory."""

    node_id: str
    plan: Plan
    gpu_free: int = 0

    @property
    def on_gpu(self) -> bool:
        return self.gpu_free > 0 and self.gpu_free >= self.plan.need


def choose_node(options: Sequence[NodeOption], *, may_evict: bool = True) -> NodeOption | None:
    """The best node: one where the model fits (without unloading anything unless ``may_evict``), on a
    GPU with room for it before one without, then the one that unloads the least, then the one with
    the most room left (ties by node id). None when it fits nowhere."""
    fitting = [o for o in options if o.plan.fits and (may_evict or not o.plan.evict)]
    if not fitting:
        return None
    return min(fitting, key=lambda o: (not o.on_gpu, o.plan.freed, len(o.plan.evict), -o.plan.room, o.node_id))
