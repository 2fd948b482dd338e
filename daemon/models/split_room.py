"""Making room for one model across nodes (llama.cpp RPC): every node of the split at once.

A model that names ``rpc_nodes`` takes memory on its main node (its share: the model's
``memory_budget_gib`` when set, else the main agent's estimate of its share,
``FitRequest.rpc_devices`` / ``agent.rpc.main_share``) and on each helper (the memory its grant
lends, ``RpcServerRequest.memory_bytes``). ``plan_across`` plans the unloading on each node with
the rules of ``daemon.models.placement`` (least recently used first within the lowest class; never
a model with requests in flight, pinned, of a higher class or of unknown size), all or nothing:
when one node cannot be made room, nothing is unloaded anywhere and the plan says what uses the
memory on that node. A model unloaded frees its part on every node of the split it holds one on
(a model across nodes stops its helpers' rpc-servers with it), and that is counted on each.

``helper_shares`` cuts what the main's estimate sends to the helpers' devices among the helpers as
llama.cpp does: by ``--tensor-split`` where it gives the RPC devices' shares (they come first in
llama.cpp's device list, after the node's own GPUs when ``--device`` names them), else evenly.
It is the one sizing of a helper's share: the start lends it (``RoomPlanner.split_needs``, from the
main agent's estimate) and the plan holds each helper to it (``daemon.sources.plan``, from the
agent's split figures: ``remote_of``, the same bytes), so a plan never promises what a start refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agent.api.llamacpp import LlamaCppSettings
from agent.api.plan import SplitFigures
from daemon.models.placement import (
    Loaded,
    ModelClass,
    NodeMemory,
    cannot_free,
    eviction_order,
    room,
)

Role = Literal["main", "helper"]


@dataclass(frozen=True)
class NodeNeed:
    """One node of the split: what the model takes there, the node's memory and what is loaded on it
    (a model across nodes is listed on each node it holds a part of, with that part's size)."""

    node: str
    role: Role
    need: int
    memory: NodeMemory
    loaded: tuple[Loaded, ...]
    shortfall: int | None = None  # the agent's own refusal said by how much (replaces the computed one)


@dataclass(frozen=True)
class Eviction:
    node: str  # the node it is unloaded to make room on
    victim: Loaded
    freed: tuple[tuple[str, int], ...]  # what it frees on each node of the split, by node


@dataclass(frozen=True)
class SplitPlan:
    """``evict`` in order; ``fits`` False means nothing is unloaded: ``node`` could not be made room."""

    fits: bool
    evict: tuple[Eviction, ...] = ()
    node: str = ""
    role: Role = "main"
    reason: str = ""


def _size_on(need: NodeNeed, model_id: str) -> int:
    return next((m.size_bytes or 0 for m in need.loaded if m.model_id == model_id), 0)


def plan_across(nodes: Sequence[NodeNeed], for_class: ModelClass = "standard") -> SplitPlan:
    """Which models to unload on which node so that the split fits on every node of ``nodes``."""
    chosen: dict[str, Eviction] = {}
    for need in nodes:
        have = room(need.memory, need.loaded)
        short = need.need - have if need.shortfall is None else need.shortfall
        short -= sum(dict(e.freed).get(need.node, 0) for e in chosen.values())  # freed for another node
        if short <= 0:
            continue
        for model in eviction_order(need.loaded):
            if model.model_id in chosen or model.why_kept(for_class) is not None:
                continue
            freed = tuple((n.node, _size_on(n, model.model_id)) for n in nodes
                          if any(m.model_id == model.model_id for m in n.loaded))
            chosen[model.model_id] = Eviction(need.node, model, freed)
            short -= model.size_bytes or 0
            if short <= 0:
                break
        if short > 0:
            return SplitPlan(fits=False, node=need.node, role=need.role,
                             reason=cannot_free(need.need, have, short, need.loaded, for_class))
    return SplitPlan(fits=True, evict=tuple(chosen.values()))


def helper_shares(remote_bytes: int, settings: LlamaCppSettings, helpers: int) -> list[int]:
    """Each helper's part of ``remote_bytes`` (one RPC device each), in ``rpc_nodes`` order."""
    if helpers <= 0:
        return []
    split = [max(float(v), 0.0) for v in (settings.tensor_split or "").split(",") if v.strip()]
    first = len(settings.gpus) if settings.gpus is not None else 0
    weights = (split + [0.0] * (first + helpers))[first:first + helpers]
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * helpers, float(helpers)
    shares = [int(remote_bytes * w / total) for w in weights]
    shares[max(range(helpers), key=lambda i: weights[i])] += remote_bytes - sum(shares)  # rounding
    return shares


def remote_of(figures: SplitFigures, offloaded: int) -> int:
    """What a main node without GPUs sends to its helpers' devices with ``--n-gpu-layers offloaded``
    (its last layers, at most all of them), as the main agent's estimate says it
    (``FitReport.remote_bytes``): those layers' weights and KV cache, and the compute buffer."""
    count = min(max(offloaded, 0), len(figures.layer_bytes))
    if count == 0:
        return 0
    return sum(figures.layer_bytes[len(figures.layer_bytes) - count:]) + figures.offload_bytes
