"""How a model runs across the fleet: ask each node's agent for its plan, and merge the answers.

Each agent plans for itself (``agent.placement``: it knows its GPUs and their free memory); the
daemon asks every online node at once (``fan_out``), names each option's node, lists the nodes
that gave no plan and why (offline, the file is not there), and adds the fleet's own option:
across nodes (llama.cpp RPC, ``across_nodes``). When no node holds the model alone, the node with
the file and the most memory runs it (the *main*) and helpers with llama.cpp's rpc-server lend
theirs: the layers are cut in order, each node's part in proportion to its room (the main's room
less what it keeps: embeddings, output head, buffers; a helper's less its part of the compute
buffer), each helper held to what its grant lends at the start (``lent``: the start's own sizing,
``split_room.helper_shares``), at the largest context of the main agent's ladder
(``NodePlan.split``) that fits, with as few helpers as that takes. A node's room is where
its part lives: its GPUs' free memory when it has GPUs, else its system memory (``NodePool``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agent.api.backends import BackendChoice
from agent.api.client import AgentClient, AgentError
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import AgentStatus
from agent.api.plan import NodeShare, SplitFigures
from agent.api.sources import FitRequest
from daemon.api.models import LOCAL_NODE
from daemon.api.plan import (
    NodePlan,
    NodePlanError,
    Plan,
    PlanOption,
    PlanQuery,
    PlanState,
)
from daemon.models import split_room

GiB = 1 << 30
ACROSS_NODES = "llama.cpp RPC: the layers shared over the network, each node holding its part"


@dataclass(frozen=True)
class NodePool:
    """The memory a node can give to a split: where its part of the layers would live."""

    node: str
    lends: bool  # its llama.cpp has the rpc-server (AgentStatus.rpc_server)
    free: int
    capacity: int
    device: str = "cpu"  # cpu: system memory; gpus: its GPUs
    host_free: int = 0  # system memory free (what a main node with GPUs keeps lives there)
    host_capacity: int = 0


def pool_of(node: str, status: AgentStatus) -> NodePool:
    """A node's pool from its agent's status: its discrete GPUs' free memory, else system memory."""
    gpus = [g for g in status.gpus if not g.unified_memory and g.memory_total > 0]
    lends = status.rpc_server is not None
    if gpus:
        return NodePool(node, lends, sum(max(0, g.memory_total - g.memory_used) for g in gpus),
                        sum(g.memory_total for g in gpus), "gpus", status.memory_available, status.memory_total)
    return NodePool(node, lends, status.memory_available, status.memory_total, "cpu", status.memory_available,
                    status.memory_total)


def main_pool(plan: NodePlan, lends: bool) -> NodePool:
    """The main node's pool from its own plan's figures (its reserves already taken off)."""
    devices = {d.device: d for o in plan.options for d in o.devices}
    cpu = devices.get("cpu")
    host_free, host_capacity = (cpu.free_bytes, cpu.capacity_bytes) if cpu else (0, 0)
    gpus = [d for name, d in devices.items() if name != "cpu"]
    if gpus:
        return NodePool(plan.node, lends, sum(d.free_bytes for d in gpus), sum(d.capacity_bytes for d in gpus),
                        "gpus", host_free, host_capacity)
    return NodePool(plan.node, lends, host_free, host_capacity, "cpu", host_free, host_capacity)


def agent_request(query: PlanQuery) -> FitRequest:
    """The agent's part of a plan query: the file, and the settings with the context asked."""
    settings = query.settings.model_copy(update={"ctx_size": query.ctx_size}) if query.ctx_size else query.settings
    return FitRequest(model_path=query.model_path, hf=query.hf, settings=settings, token=query.token)


def cut_layers(layers: Sequence[int], rooms: Sequence[int]) -> list[int] | None:
    """How many of ``layers`` (in order) each node takes: in proportion to its room (a layer goes
    where its middle falls), else as many as fit in order; None when they do not fit."""
    if any(r < 0 for r in rooms) or sum(layers) > sum(max(r, 0) for r in rooms):
        return None
    total, room = sum(layers), sum(rooms)
    bounds = [total * sum(rooms[:i + 1]) / room for i in range(len(rooms))] if room else [0.0] * len(rooms)
    counts, done, node = [0] * len(rooms), 0, 0
    for size in layers:
        while node < len(rooms) - 1 and done + size / 2 > bounds[node]:
            node += 1
        counts[node] += 1
        done += size
    if _fits(layers, counts, rooms):
        return counts
    counts, start = [], 0
    for r in rooms:  # as many as fit, in order
        taken = 0
        while start + taken < len(layers) and sum(layers[start:start + taken + 1]) <= r:
            taken += 1
        counts.append(taken)
        start += taken
    return counts if start == len(layers) else None


def _fits(layers: Sequence[int], counts: Sequence[int], rooms: Sequence[int]) -> bool:
    start = 0
    for count, room in zip(counts, rooms, strict=True):
        if sum(layers[start:start + count]) > room:
            return False
        start += count
    return True


def _rooms(figures: SplitFigures, pools: Sequence[NodePool], empty: bool) -> list[int] | None:
    """Each node's room for layers (the main first); None when the main cannot keep its rest."""
    main = pools[0]
    memory = [p.capacity if empty else p.free for p in pools]
    if main.device == "gpus":
        if figures.main_bytes > (main.host_capacity if empty else main.host_free):
            return None
        return memory
    return [memory[0] - figures.main_bytes, *memory[1:]]


def _tensor_split(pools: Sequence[NodePool], counts: Sequence[int]) -> str | None:
    """``--tensor-split`` of a main without GPUs and several helpers without GPUs (one RPC device each)."""
    if len(pools) > 2 and all(p.device == "cpu" for p in pools):
        return ",".join(str(c) for c in counts[1:])
    return None


def lent(figures: SplitFigures, pools: Sequence[NodePool], counts: Sequence[int]) -> list[int] | None:
    """What each helper's grant lends when the split starts: ``split_room.helper_shares`` of what the
    main sends to the helpers, the sizing ``RoomPlanner.split_needs`` gives the start; None where the
    start sizes none (a main with GPUs: its agent cannot tell its own GPUs' part)."""
    if pools[0].device != "cpu":
        return None
    offloaded = len(figures.layer_bytes) - counts[0]
    return split_room.helper_shares(split_room.remote_of(figures, offloaded),
                                    LlamaCppSettings(tensor_split=_tensor_split(pools, counts)), len(pools) - 1)


def _split(figures: SplitFigures, pools: Sequence[NodePool], empty: bool) -> list[int] | None:
    """Each node's layers, or None: the helpers are held to what their grants will lend (``lent``)."""
    rooms = _rooms(figures, pools, empty)
    if rooms is None:
        return None
    if pools[0].device == "cpu" and figures.offload_bytes:  # the helpers hold the compute buffer besides their layers
        room = sum(max(r, 0) for r in rooms[1:])
        rooms = [rooms[0], *(max(0, r - (-(-figures.offload_bytes * max(r, 0) // room) if room else 0))
                             for r in rooms[1:])]
    counts = cut_layers(figures.layer_bytes, rooms)
    if counts is None:
        return None
    memory = [p.capacity if empty else p.free for p in pools[1:]]
    lends = lent(figures, pools, counts)
    return None if lends is not None and any(need > have for need, have in zip(lends, memory, strict=True)) else counts


def _unavailable(label: str, message: str) -> list[PlanOption]:
    return [PlanOption(kind="nodes", label=label, state="unavailable", ctx_size=0, max_ctx_size=0,
                       max_ctx_size_empty=0, message=message)]


def node_name(names: Mapping[str, str], node: str) -> str:
    """A node as people read it: its name (``NodeManager.names``), else the start of its id."""
    return names.get(node) or node[:12]


def across_nodes(plans: Sequence[NodePlan], pools: Mapping[str, NodePool] | None = None,
                 names: Mapping[str, str] | None = None) -> list[PlanOption]:
    """The fleet's option of running one model over several nodes (llama.cpp RPC). ``plans`` are the
    nodes that read the file; ``pools`` every online node's memory (a helper needs no file); ``names``
    the nodes' names, for its label and messages. None with fewer than two nodes; not available when
    one node holds the model alone, or no pair of nodes has llama.cpp's rpc-server; else the split,
    in memory free now or once room is made."""
    pools, names = pools or {}, names or {}
    nodes = {p.node for p in plans} | set(pools)
    if len(nodes) < 2:
        return []
    label = "across nodes (llama.cpp RPC)"
    alone = next((o for p in plans for o in p.options if o.state in ("free", "needs_room")), None)
    if alone is not None:
        return _unavailable(label, f"not needed: it runs on node {node_name(names, alone.node or plans[0].node)} alone "
                            f"({alone.label}), faster than over the network")
    mains = [main_pool(p, pools[p.node].lends) for p in plans if p.node in pools and pools[p.node].lends and p.split]
    if not mains:
        why = "no node with the file has llama.cpp's rpc-server" if any(p.split for p in plans) else \
            "the agents give no figures for a split (update them)"
        return _unavailable(label, f"{why}: {ACROSS_NODES}")
    main = max(mains, key=lambda m: (m.capacity, m.free))
    plan = next(p for p in plans if p.node == main.node)
    helpers = sorted((p for p in pools.values() if p.node not in (main.node, LOCAL_NODE) and p.lends),  # local: loopback only
                     key=lambda p: (-p.capacity, -p.free, p.node))
    if not helpers:
        return _unavailable(label, f"no other node has llama.cpp's rpc-server: {ACROSS_NODES}")
    return [_option(plan, main, helpers, names)]


def _option(plan: NodePlan, main: NodePool, helpers: Sequence[NodePool], names: Mapping[str, str]) -> PlanOption:
    ladder = plan.split
    state: PlanState = "too_big"
    k = len(helpers)
    for judged, empty in (("free", False), ("needs_room", True)):
        found = next((n for n in range(1, len(helpers) + 1)
                      if _split(ladder[0], [main, *helpers[:n]], empty) is not None), None)
        if found is not None:
            state, k = judged, found  # type: ignore[assignment]
            break
    pools = [main, *helpers[:k]]
    fit_now = [f.ctx_size for f in ladder if _split(f, pools, False) is not None]
    fit_empty = [f.ctx_size for f in ladder if _split(f, pools, True) is not None]
    max_now, max_empty = max(fit_now, default=0), max(fit_empty, default=0)
    ctx = max_now or max_empty or ladder[0].ctx_size
    figures = next(f for f in ladder if f.ctx_size == ctx)
    counts = _split(figures, pools, state == "needs_room") or _even(len(figures.layer_bytes), len(pools))
    lends = lent(figures, pools, counts)
    shares, start = [], 0
    for i, (pool, count) in enumerate(zip(pools, counts, strict=True)):
        need = sum(figures.layer_bytes[start:start + count]) if i == 0 or lends is None else lends[i - 1]
        if i == 0 and pool.device == "cpu":
            need += figures.main_bytes
        shares.append(NodeShare(node=pool.node, role="main" if i == 0 else "helper", layers=count,
                                device=pool.device, needed_bytes=need, free_bytes=pool.free,
                                capacity_bytes=pool.capacity))
        start += count
    blocks = len(figures.layer_bytes)
    # A CPU main keeps its first layers (llama.cpp offloads the last --n-gpu-layers); a main with
    # GPUs offloads them all and llama.cpp shares them by the devices' free memory, as figured.
    offloaded = blocks - counts[0] if main.device == "cpu" else blocks + 1
    update: dict[str, object] = {"ctx_size": ctx, "n_gpu_layers": offloaded, "gpus": None, "main_gpu": None,
                                 "split_mode": None, "tensor_split": None}
    args = ["--ctx-size", str(ctx), "--n-gpu-layers", str(offloaded)]
    if _tensor_split(pools, counts) is not None:
        update["tensor_split"] = _tensor_split(pools, counts)  # one RPC device per helper
        args += ["--tensor-split", str(update["tensor_split"])]
    base = plan.options[0].settings if plan.options else LlamaCppSettings()
    parts = " + ".join(f"{s.layers} on {node_name(names, s.node)}" for s in shares)
    return PlanOption(
        kind="nodes", label=f"across {len(pools)} nodes over llama.cpp RPC ({parts} layers)", node=main.node,
        state=state, ctx_size=ctx, max_ctx_size=max_now, max_ctx_size_empty=max_empty, n_gpu_layers=offloaded,
        settings=base.model_copy(update=update), args=args, rpc_nodes=[p.node for p in pools[1:]], shares=shares,
        message=_message(state, ctx, shares, names))


def _even(layers: int, nodes: int) -> list[int]:
    return [layers // nodes + (1 if i < layers % nodes else 0) for i in range(nodes)]


def _message(state: PlanState, ctx: int, shares: Sequence[NodeShare], names: Mapping[str, str]) -> str:
    def gib(value: int) -> str:
        return f"{value / GiB:.1f} GiB"

    if state == "free":
        return f"fits in the memory free now over {len(shares)} nodes, with a context of {ctx} tokens ({ACROSS_NODES})"
    if state == "needs_room":
        short = [f"{gib(s.needed_bytes - s.free_bytes)} more on {node_name(names, s.node)}" for s in shares
                 if s.needed_bytes > s.free_bytes]
        return "fits once room is made: " + (", ".join(short) or "on the nodes")
    need, have = sum(s.needed_bytes for s in shares), sum(s.capacity_bytes for s in shares)
    return f"too big even for these nodes' memory together: it needs {gib(need)} of {gib(have)}"


def merge(plans: Sequence[NodePlan], errors: Sequence[NodePlanError],
          pools: Mapping[str, NodePool] | None = None, names: Mapping[str, str] | None = None) -> Plan:
    """One plan of the nodes' answers, each option named with its node, and the fleet's options."""
    named = [p.model_copy(update={"options": [o.model_copy(update={"node": p.node}) for o in p.options]})
             for p in plans]
    first = named[0] if named else None
    return Plan(source=first.source if first else "", summary=first.summary if first else None, nodes=named,
                fleet=across_nodes(named, pools, names), errors=list(errors))


async def fan_out(clients: Sequence[tuple[str, AgentClient]], request: FitRequest,
                  errors: Sequence[NodePlanError] = (),
                  backend_of: Callable[[str], BackendChoice] = lambda _node: "auto",
                  names: Mapping[str, str] | None = None) -> Plan:
    """Every node's plan at once (with several nodes, each one's memory for a split too), each
    asked with that node's backend choice; a node that fails is listed with its error. When every
    node failed, the first error to come back is raised (AgentError), as a one-node call's would be.
    ``names``: the nodes' names, for what the fleet's options say."""

    raised: list[AgentError] = []

    async def one(node: str, client: AgentClient) -> NodePlan | NodePlanError:
        try:
            asked = request.model_copy(update={"backend": backend_of(node)})
            return (await client.plan(asked)).model_copy(update={"node": node})
        except AgentError as exc:
            raised.append(exc)
            return NodePlanError(node=node, code=exc.code, message=exc.message)

    async def pool(node: str, client: AgentClient) -> NodePool | None:
        try:
            return pool_of(node, await client.status())
        except AgentError:  # no pool from it: it lends nothing to a split
            return None

    several = len(clients) > 1  # a split needs two nodes: only then is each one's memory asked
    answers, found = await asyncio.gather(
        asyncio.gather(*(one(node, client) for node, client in clients)),
        asyncio.gather(*(pool(node, client) for node, client in clients if several)))
    plans = [a for a in answers if isinstance(a, NodePlan)]
    if raised and not plans:
        raise raised[0]
    pools = {p.node: p for p in found if p is not None}
    return merge(plans, [*errors, *(a for a in answers if isinstance(a, NodePlanError))], pools, names)
