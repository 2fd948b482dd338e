"""Placement: which of a node's GPUs a start uses, and every way a model can run on a node.

Pure functions over the memory figures of one node (``NodeMemory``: what is usable now and what
would be with every device empty), held by tests with fake GPUs. ``placed_gpus`` reads a start's
GPU settings (``gpus``, ``split_mode``, ``tensor_split``, ``main_gpu``) into the GPUs admission
holds it against; ``plan_node`` lists the options of ``agent.api.plan``: each GPU alone, the
node's GPUs split by layers (``--tensor-split`` by their free memory), part of the layers
offloaded (as many as fit at a modest context), the CPU, or the node's unified memory. Each comes
with the largest context that fits and what each device holds (``agent.memory_estimate``).
``split_figures`` gives what each layer takes at a ladder of contexts, from which the daemon works
out a split of the layers across nodes (llama.cpp RPC).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.api.llamacpp import CUDA_DEVICE, LlamaCppSettings, device_names
from agent.api.plan import (
    PLAN_KINDS,
    PLAN_STATES,
    DeviceUse,
    PlanKind,
    PlanOption,
    PlanState,
    SplitFigures,
)
from agent.api.sources import GgufSummary
from agent.memory_estimate import (
    DEFAULT_CTX,
    MAX_CTX,
    Budget,
    GiB,
    estimate,
    fits,
    kv_bytes,
    max_ctx_size,
    max_gpu_layers,
    run_shape,
)
from agent.problems import AgentProblem

PARTIAL_CTX = 8192  # the context a partial offload is sized at when none is asked
SPLIT_MIN_CTX = 2048  # the smallest context of the ladder a split across nodes is figured at
PLACEMENT_FIELDS = ("gpus", "split_mode", "tensor_split", "main_gpu", "n_gpu_layers", "ctx_size")
_CLEARED: dict[str, Any] = {"gpus": None, "split_mode": None, "tensor_split": None, "main_gpu": None}


class UnknownGpu(AgentProblem, status=422, code="unknown_gpu"):
    pass


@dataclass(frozen=True)
class Device:
    """A discrete GPU as placement sees it: usable bytes now, and with nothing else on it."""

    index: int
    name: str
    free: int
    capacity: int


@dataclass(frozen=True)
class NodeMemory:
    """One node's memory for a start, reserves (and what loads still take) already taken off."""

    host_free: int
    host_capacity: int
    gpus: tuple[Device, ...] = ()
    unified: bool = False
    memory_total: int = 0
    memory_available: int = 0
    device_prefix: str = CUDA_DEVICE  # how the backend a start computes on names the GPUs (Vulkan0, CUDA0, MTL0)


def split_values(text: str | None) -> tuple[float, ...]:
    return tuple(float(part) for part in text.split(",")) if text else ()


def placed_gpus(settings: LlamaCppSettings, indices: Sequence[int]) -> tuple[list[int], tuple[float, ...]]:
    """Positions in ``indices`` (the node's GPU indices) a start uses, and its split of them
    (``()``: by their free memory, as llama.cpp's default does). UnknownGpu for a GPU not there."""
    if settings.gpus is None:
        chosen = list(range(len(indices)))
    else:
        position = {gpu: i for i, gpu in enumerate(indices)}
        missing = [gpu for gpu in settings.gpus if gpu not in position]
        if missing:
            have = ", ".join(str(i) for i in indices) or "none"
            raise UnknownGpu(f"GPU {missing[0]} is not on this node (its GPUs: {have})",
                             details={"gpu": missing[0], "gpus": list(indices)})
        chosen = [position[gpu] for gpu in dict.fromkeys(settings.gpus)]
    if not chosen:
        return [], ()
    if settings.split_mode == "none":
        main = settings.main_gpu or 0
        if main >= len(chosen):
            raise UnknownGpu(f"main_gpu {main} is beyond the {len(chosen)} GPU(s) it runs on",
                             details={"main_gpu": main})
        return [chosen[main]], (1.0,)
    split = split_values(settings.tensor_split)[:len(chosen)]
    if not any(s > 0 for s in split):
        return chosen, ()
    return chosen, split + (0.0,) * (len(chosen) - len(split))


def proportions(values: Sequence[int]) -> tuple[str, tuple[float, ...]]:
    """A ``--tensor-split`` in whole percent (each at least 1, reduced: 75,25 -> 3,1) and its shares."""
    total = sum(max(v, 0) for v in values) or len(values)
    parts = [max(1, round(100 * max(v, 0) / total)) if total else 1 for v in values]
    divisor = math.gcd(*parts)
    parts = [p // divisor for p in parts]
    return ",".join(str(p) for p in parts), tuple(float(p) for p in parts)


def placement_args(settings: LlamaCppSettings, device_prefix: str = CUDA_DEVICE) -> list[str]:
    """The llama-server flags of a placement, as ``build_args`` writes them for a backend whose
    devices are named ``{device_prefix}{index}``."""
    args: list[str] = []
    for name in PLACEMENT_FIELDS:
        value = getattr(settings, name)
        if value is None:
            continue
        flag = str((LlamaCppSettings.model_fields[name].json_schema_extra or {})["flag"])  # type: ignore[index]
        args += [flag, device_names(value, device_prefix) if name == "gpus" else str(value)]
    return args


def _gib(value: int) -> str:
    return f"{value / GiB:.1f} GiB"


def _message(state: PlanState, ctx: int, devices: list[DeviceUse]) -> str:
    if state == "free":
        return f"fits in the memory free now, with a context of {ctx} tokens"
    short = [f"{_gib(d.needed_bytes - d.free_bytes)} more on {d.device}" for d in devices
             if d.needed_bytes > d.free_bytes]
    if state == "needs_room":
        return "fits once room is made: " + ", ".join(short) if short else "fits once room is made"
    over = [f"{d.device} needs {_gib(d.needed_bytes)} of {_gib(d.capacity_bytes)}" for d in devices
            if d.needed_bytes > d.capacity_bytes]
    return "too big even with the devices empty" + (": " + ", ".join(over) if over else "")


def _option(summary: GgufSummary, settings: LlamaCppSettings, memory: NodeMemory, kind: PlanKind, label: str,
            devices: Sequence[Device], layers: int, split: tuple[float, ...], update: dict[str, Any]) -> PlanOption:
    base = settings.model_copy(update=update)
    now = Budget(memory.host_free, tuple(d.free for d in devices), split)
    empty = Budget(memory.host_capacity, tuple(d.capacity for d in devices), split)
    max_now = max_ctx_size(summary, base, now, layers)
    max_empty = max_ctx_size(summary, base, empty, layers)
    if settings.ctx_size:
        ctx = settings.ctx_size
        trial = estimate(summary, base, layers, now.shares)
        state: PlanState = "free" if fits(trial, now) else "needs_room" if fits(trial, empty) else "too_big"
    else:
        ctx = max_now or max_empty or run_shape(summary, base).ctx
        state = "free" if max_now else "needs_room" if max_empty else "too_big"
    final = base.model_copy(update={"ctx_size": ctx})
    est = estimate(summary, final, layers, now.shares)
    uses = [DeviceUse(device="cpu", needed_bytes=est.host_bytes, free_bytes=max(memory.host_free, 0),
                      capacity_bytes=max(memory.host_capacity, 0))]
    uses += [DeviceUse(device=f"{memory.device_prefix}{d.index}", gpu_index=d.index, name=d.name, needed_bytes=need,
                       free_bytes=d.free, capacity_bytes=d.capacity)
             for d, need in zip(devices, est.gpu_bytes, strict=False)]
    return PlanOption(kind=kind, label=label, gpus=[d.index for d in devices], state=state, ctx_size=ctx,
                      max_ctx_size=max_now, max_ctx_size_empty=max_empty, n_gpu_layers=est.n_gpu_layers,
                      settings=final, args=placement_args(final.model_copy(update={"ctx_size": ctx}),
                                                          memory.device_prefix),
                      estimate=est, devices=uses, message=_message(state, ctx, uses))


def rank(option: PlanOption) -> tuple[int, int, int, int, tuple[int, ...]]:
    """Best first: what fits now, then the faster placement, then the larger context."""
    return (PLAN_STATES.index(option.state), PLAN_KINDS.index(option.kind), -option.max_ctx_size,
            -option.max_ctx_size_empty, tuple(option.gpus))


def plan_node(summary: GgufSummary, settings: LlamaCppSettings, memory: NodeMemory) -> list[PlanOption]:
    """Every way the model runs on this node, best first. ``settings`` are kept but for placement;
    its ``ctx_size``, when set, is the context each option is judged at."""
    full = summary.block_count + 1  # every layer and the output head
    if memory.unified:
        return [_option(summary, settings, memory, "unified", "unified memory (the GPU shares system memory)",
                        (), 0, (), {})]
    if not memory.gpus:
        return [_option(summary, settings, memory, "cpu", "CPU", (), 0, (), {**_CLEARED, "n_gpu_layers": None})]
    options = [
        _option(summary, settings, memory, "gpu", f"GPU {d.index}" + (f" ({d.name})" if d.name else ""), (d,), full,
                (1.0,), {**_CLEARED, "gpus": [d.index], "n_gpu_layers": full})
        for d in memory.gpus]
    gpus = list(memory.gpus)
    frees = [d.free for d in gpus]
    split_text, split = proportions(frees if all(f > 0 for f in frees) else [d.capacity for d in gpus])
    spread: dict[str, Any] = {**_CLEARED, "gpus": [d.index for d in gpus]}
    if len(gpus) > 1:
        spread.update(split_mode="layer", tensor_split=split_text)
        names = ",".join(str(d.index) for d in gpus)
        options.append(_option(summary, settings, memory, "split", f"GPUs {names} split by layers ({split_text})",
                               gpus, full, split, {**spread, "n_gpu_layers": full}))
    else:
        split = (1.0,)
    sized = settings.model_copy(update={**spread, "ctx_size": settings.ctx_size or min(
        summary.context_length or DEFAULT_CTX, PARTIAL_CTX)})
    layers = (max_gpu_layers(summary, sized, Budget(memory.host_free, tuple(frees), split))
              or max_gpu_layers(summary, sized, Budget(memory.host_capacity, tuple(d.capacity for d in gpus), split)))
    if 0 < layers < full:
        where = "GPU " + str(gpus[0].index) if len(gpus) == 1 else "GPUs " + ",".join(str(d.index) for d in gpus)
        options.append(_option(summary, settings, memory, "partial",
                               f"{layers} of {full} layers on {where}, the rest on the CPU", gpus, layers, split,
                               {**spread, "n_gpu_layers": layers}))
    options.append(_option(summary, settings, memory, "cpu", "CPU only", (), 0, (),
                           {**_CLEARED, "gpus": [], "n_gpu_layers": 0}))
    return sorted(options, key=rank)


def split_contexts(summary: GgufSummary, settings: LlamaCppSettings) -> list[int]:
    """The contexts a split across nodes is figured at: the one asked, else doubling from
    ``SPLIT_MIN_CTX`` up to the model's native context (which ends the ladder)."""
    if settings.ctx_size:
        return [settings.ctx_size]
    top = min(MAX_CTX, (summary.context_length or DEFAULT_CTX) * (settings.parallel or 1))
    ladder, ctx = [], SPLIT_MIN_CTX
    while ctx < top:
        ladder.append(ctx)
        ctx *= 2
    return [*ladder, top]


def split_figures(summary: GgufSummary, settings: LlamaCppSettings) -> list[SplitFigures]:
    """What each repeating layer takes (weights and KV cache), what the main node keeps and what the
    helpers' devices take beyond their layers, at each context of ``split_contexts``: the estimate
    of the model on one CPU, cut by layer. Empty when the header gives no layer sizes."""
    if not summary.layer_bytes or len(summary.layer_bytes) != summary.block_count:
        return []
    figures = []
    for ctx in split_contexts(summary, settings):
        sized = settings.model_copy(update={**_CLEARED, "ctx_size": ctx, "n_gpu_layers": 0})
        whole = estimate(summary, sized)
        layers = [w + kv for w, kv in zip(summary.layer_bytes, kv_bytes(summary, run_shape(summary, sized)),
                                          strict=False)]
        # the last layer on one device, as agent.rpc.main_share figures what goes to the helpers: the rest is the buffer
        one = sum(estimate(summary, sized, 1, (1.0,)).gpu_bytes) - layers[-1] if layers else 0
        figures.append(SplitFigures(ctx_size=whole.ctx_size, layer_bytes=layers,
                                    main_bytes=max(0, whole.total_bytes - sum(layers)), offload_bytes=max(0, one)))
    return figures
