"""Admission: a model starts only when the node has the memory for it, unless the start is forced.

Before a spawn the agent reads the model's GGUF header (a malformed one is refused outright),
estimates what the instance needs (``agent.memory_estimate``) and compares it with what is free:
system memory less a reserve, less what instances still loading will take; on discrete GPUs each
GPU's free memory less its own reserve, for the GPUs the start is placed on (``gpus``,
``split_mode``, ``tensor_split``, ``main_gpu``: ``agent.placement.placed_gpus``), each held to its
own budget. A launch spec's memory budget (the model's ``memory_budget_gib``) replaces the estimate, held against system memory alone.
A start with ``rpc_peers`` (one model across nodes) is held to the main node's share only: the
layers ``--n-gpu-layers`` leaves on it, their KV cache and its small compute buffer, and its own
GPUs' part when a ``--tensor-split`` says it (``agent.rpc.main_share``). On unified memory
(Apple silicon, DGX Spark, Jetson) free memory only tells the truth once a load has finished, so
starts go one at a time there.
``report`` answers the same question for the "will it fit" API, with the largest context and
GPU-layer count that would fit.

Model folders (vLLM, MLX) are estimated from their weight files (``agent.memory_estimate``:
``folder_need``, the weights plus a documented margin); a folder with no weight file is refused.

- MLX (Apple silicon, unified memory): the weights plus the margin, or the model's memory budget
  when it has one, against available memory less the reserve and what loading models were promised
  (a budget smaller than the weights themselves is refused).
- vLLM on NVIDIA GPUs: vLLM takes what it is told to, ``--gpu-memory-utilization`` of each GPU it
  uses, so that is held against each such GPU's free memory less the GPU reserve: the memory
  budget when the model has one, else vLLM's own default (90 % of the GPU). A start without a
  budget is not refused: a user who gave none expects vLLM's default, the GPU to itself; a budget
  is how two models share one GPU. The weights (their part on each GPU, with tensor parallelism)
  plus the margin must fit in that share, else vLLM would load them and then find no room for its
  KV cache: refused with both numbers. The GPUs it uses are ``CUDA_VISIBLE_DEVICES``' (from the
  model's env) or the first ``tensor_parallel_size`` ones. GPU memory is only known once a load
  has finished, so a vLLM start waits for another one still loading (as on unified memory).
- vLLM on unified memory (DGX Spark's GB10, Jetson): the same share, of system memory.
- vLLM without a GPU: the weights, the margin and vLLM's CPU KV cache (``VLLM_CPU_KVCACHE_SPACE``,
  4 GiB by default), or the budget, against system memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
from collections.abc import Awaitable, Callable
from pathlib import Path
from stat import S_ISREG
from typing import Protocol

import psutil
from pydantic import BaseModel, Field

from agent.api.backends import Backend, BackendChoice
from agent.api.llamacpp import CUDA_DEVICE, LlamaCppSettings
from agent.api.models import GpuInfo, InstanceState, LaunchSpec
from agent.api.runtimes import profile
from agent.api.sources import FitReport, GgufSummary, GpuBudget
from agent.api.vllm import VllmSettings
from agent.gguf_facts import shard_names, summarize
from agent.gguf_reader import GgufError, read_header
from agent.gpu import GpuProbe
from agent.memory_estimate import (
    VLLM_CPU_KV_DEFAULT,
    WEIGHT_SUFFIXES,
    Budget,
    GiB,
    MiB,
    estimate,
    fits,
    folder_margin,
    folder_need,
    max_ctx_size,
    max_gpu_layers,
    resolve_gpu_layers,
    vllm_gpu_need,
    vllm_weights_per_gpu,
)
from agent.placement import Device, NodeMemory, placed_gpus
from agent.problems import InsufficientMemory, InvalidModelFile, StartInProgress
from agent.rpc.main_share import main_share, max_main_ctx, share_fits

_LOGGER = logging.getLogger(__name__)

UNIFIED_GPU_NAMES = ("GB10", "Orin", "Thor", "Xavier")
_RPC_CLEARED: dict[str, object] = {"split_mode": None, "tensor_split": None, "main_gpu": None}  # span RPC devices too
CACHE_SIZE = 64


class AdmissionPolicy(BaseModel):
    reserve_bytes: int = Field(default=GiB, ge=0, description="System memory never promised to a model.")
    reserve_fraction: float = Field(default=0.0, ge=0, le=0.9, description="Or this share of it, if larger.")
    gpu_reserve_bytes: int = Field(default=512 * MiB, ge=0, description="Kept free on each discrete GPU.")
    unified_memory: bool | None = Field(default=None, description="None: detect (Apple silicon, GB10, Jetson).")
    unified_wait_s: float = Field(default=20.0, ge=0, description="Wait for another load before refusing.")

    def reserve(self, total: int) -> int:
        return max(self.reserve_bytes, int(total * self.reserve_fraction))


class MemoryProbe(Protocol):
    def memory(self) -> tuple[int, int]:
        """(total, available) system memory in bytes. Blocking."""
        ...


class PsutilMemoryProbe:
    def memory(self) -> tuple[int, int]:
        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)


def is_unified(gpus: list[GpuInfo], policy: AdmissionPolicy) -> bool:
    if policy.unified_memory is not None:
        return policy.unified_memory
    if platform.system() == "Darwin" and platform.machine() in ("arm64", "aarch64"):
        return True
    return any(gpu.unified_memory or marker in gpu.name for gpu in gpus for marker in UNIFIED_GPU_NAMES)


def gib(value: int) -> str:
    return f"{value / GiB:.2f} GiB"


def inspect_file(path: str) -> GgufSummary:
    """The summary of a local model (every shard of a split one); InvalidModelFile when malformed."""
    try:
        header = read_header(path)
        extra = 0
        names = shard_names(os.path.basename(path))
        for name in names[1:]:
            shard = os.path.join(os.path.dirname(path), name)
            if not os.path.isfile(shard):
                raise InvalidModelFile(f"{os.path.basename(path)} is split, and shard {name} is missing")
            extra += read_header(shard).file_size
    except GgufError as exc:
        raise InvalidModelFile(f"{os.path.basename(path)} is not a usable GGUF file: {exc}") from exc
    except OSError as exc:
        raise InvalidModelFile(f"cannot read {os.path.basename(path)}: {exc.strerror or exc}") from exc
    return summarize(header, extra)


def folder_weights(path: str) -> int:
    """The size of a model folder's weight files (``WEIGHT_SUFFIXES``, in sub-folders too);
    InvalidModelFile when it is no folder or holds none."""
    if not os.path.isdir(path):
        raise InvalidModelFile(f"{path} is not a model folder on this node")
    total, count = 0, 0
    for root, _dirs, files in os.walk(path, followlinks=True):
        for name in files:
            if name.endswith(WEIGHT_SUFFIXES) and not name.startswith("training_args"):
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
                count += 1
    if count == 0:
        raise InvalidModelFile(f"{os.path.basename(os.path.normpath(path))} holds no weight files "
                               f"({', '.join('*' + s for s in WEIGHT_SUFFIXES)}): nothing to load")
    return total


def _tensor_parallel(spec: LaunchSpec) -> int:
    """The GPUs one model is split over (vLLM's tensor parallelism; 1 for any other runtime)."""
    own = spec.runtime_settings
    return (own.tensor_parallel_size or 1) if isinstance(own, VllmSettings) else 1


def _visible_gpus(spec: LaunchSpec, gpus: list[GpuInfo]) -> list[GpuInfo]:
    """The GPUs a vLLM start uses: CUDA_VISIBLE_DEVICES' indices, else the first tensor-parallel ones."""
    tp = _tensor_parallel(spec)
    visible = spec.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [int(part) for part in visible.split(",") if part.strip().isdigit()]
        chosen = [g for index in wanted for g in gpus if g.index == index]
        return chosen[:tp]
    return sorted(gpus, key=lambda g: g.index)[:tp]


class ModelInspector:
    """GGUF summaries of local files, cached by path, size and modification time."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, int], GgufSummary] = {}

    async def summary(self, path: str) -> GgufSummary:
        try:
            stat = Path(path).stat()
        except OSError as exc:
            raise InvalidModelFile(f"cannot read {os.path.basename(path)}: {exc.strerror or exc}") from exc
        if not S_ISREG(stat.st_mode):  # a FIFO or a device would block or never end
            raise InvalidModelFile(f"{os.path.basename(path)} is not a regular file")
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        found = self._cache.get(key)
        if found is None:
            found = await asyncio.to_thread(inspect_file, path)
            if len(self._cache) >= CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = found
        return found


#: The backend a llama.cpp start with a node's choice computes on; None for a build that names none.
ComputesOn = Callable[[BackendChoice], Awaitable[Backend | None]]


class Admission:
    """The admission check of one agent; ``instances`` lists (id, state, pid) of its instances."""

    def __init__(self, policy: AdmissionPolicy, memory: MemoryProbe, gpus: GpuProbe,
                 models_dir: Path | None = None, computes_on: ComputesOn | None = None) -> None:
        self.policy = policy
        self.computes_on = computes_on  # the backend a llama.cpp start with a node choice computes on
        self.models_dir = models_dir  # a relative model folder is taken under it (vLLM's relative paths)
        self.memory = memory
        self.gpus = gpus
        self.inspector = ModelInspector()
        self._admitted: dict[str, int] = {}  # instance id -> host bytes it was admitted with

    def _pending(self, loading: list[tuple[str, int | None]]) -> int:
        """What instances still loading will take on top of what they hold now."""
        total = 0
        for instance_id, pid in loading:
            rss = 0
            if pid is not None:
                try:
                    rss = psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    rss = 0
            total += max(0, self._admitted.get(instance_id, 0) - rss)
        return total

    async def devices(self, choice: BackendChoice) -> tuple[list[GpuInfo], str]:
        """The GPUs a llama.cpp start with the node's backend ``choice`` computes on, and how that
        backend names them: none where it runs on the CPU (its build has no GPU backend that works
        here, or the node chose ``cpu``), so memory is counted where the layers really go. A build
        that names no backends (one on PATH) is taken at its word: every GPU, named as CUDA's."""
        gpus = await asyncio.to_thread(self.gpus.sample)
        backend = await self.computes_on(choice) if self.computes_on is not None else None
        if backend is Backend.CPU:
            return [], CUDA_DEVICE
        return gpus, (backend.device_prefix if backend is not None else None) or CUDA_DEVICE

    async def report(self, summary: GgufSummary, settings: LlamaCppSettings, *, source: str = "",
                     loading: list[tuple[str, int | None]] | None = None, rpc_devices: int = 0,
                     backend: BackendChoice = "auto") -> FitReport:
        """``rpc_devices``: the helpers' RPC devices of a model across nodes; the report is then of
        the main node's share (``agent.rpc.main_share``). ``backend``: the node's choice (``devices``)."""
        total, available = await asyncio.to_thread(self.memory.memory)
        gpus, _prefix = await self.devices(backend)
        unified = is_unified(gpus, self.policy)
        reserve = self.policy.reserve(total)
        pending = self._pending(loading or [])
        budgets = [] if unified else [
            GpuBudget(index=g.index, name=g.name, free_bytes=max(0, g.memory_total - g.memory_used),
                      budget_bytes=max(0, g.memory_total - g.memory_used - self.policy.gpu_reserve_bytes))
            for g in gpus]
        # the GPUs it is placed on; on unified memory there are none of their own
        placing = settings.model_copy(update=_RPC_CLEARED) if rpc_devices else settings
        positions, split = ([], ()) if unified else placed_gpus(placing, [b.index for b in budgets])
        placed = [budgets[p] for p in positions]
        if rpc_devices:
            return self._rpc_report(summary, settings, rpc_devices, placed, total, available, reserve, pending,
                                    budgets, unified, source)
        budget = Budget(host=available - reserve - pending, gpus=tuple(b.budget_bytes for b in placed), split=split)
        layers = resolve_gpu_layers(summary, settings, budget)
        est = estimate(summary, settings, layers, budget.shares)
        for gpu_budget, need in zip(placed, est.gpu_bytes, strict=False):
            gpu_budget.needed_bytes = need
        ok = fits(est, budget)
        return FitReport(
            summary=summary, estimate=est, memory_total=total, memory_available=available,
            reserve_bytes=reserve, pending_bytes=pending, gpus=budgets, unified_memory=unified, fits=ok,
            max_ctx_size=max_ctx_size(summary, settings, budget, layers),
            max_gpu_layers=max_gpu_layers(summary, settings, budget) if budget.shares else None,
            message=_message(est.host_bytes, est.gpu_bytes, placed, available, reserve, pending, ok),
            source=source)

    def _rpc_report(self, summary: GgufSummary, settings: LlamaCppSettings, rpc_devices: int,
                    placed: list[GpuBudget], total: int, available: int, reserve: int, pending: int,
                    budgets: list[GpuBudget], unified: bool, source: str) -> FitReport:
        """The main node's share of a model across nodes, held to this node's memory."""
        share = main_share(summary, settings, rpc_devices, len(placed))
        host = available - reserve - pending
        held = [b.budget_bytes for b in placed] if share.gpus_known else []
        for gpu_budget, need in zip(placed, share.estimate.gpu_bytes, strict=False):
            gpu_budget.needed_bytes = need
        ok = share_fits(share, host, held)
        message = _message(share.estimate.host_bytes, share.estimate.gpu_bytes, placed, available, reserve,
                           pending, ok)
        message += (f" (the main node's share: {share.estimate.n_gpu_layers} of {summary.block_count + 1} layers "
                    f"on {rpc_devices} RPC device(s){'' if share.gpus_known else ' and its GPUs'}, "
                    f"{gib(share.remote_bytes)} there)")
        return FitReport(
            summary=summary, estimate=share.estimate, memory_total=total, memory_available=available,
            reserve_bytes=reserve, pending_bytes=pending, gpus=budgets, unified_memory=unified, fits=ok,
            max_ctx_size=max_main_ctx(summary, settings, rpc_devices, host, held), max_gpu_layers=None,
            message=message, source=source, remote_bytes=share.remote_bytes if share.gpus_known else None)

    async def snapshot(self, loading: list[tuple[str, int | None]] | None = None,
                       backend: BackendChoice = "auto") -> NodeMemory:
        """This node's memory for a plan (``agent.placement``): usable now, and with every device
        empty; the GPUs of the backend a start with the node's choice computes on (``devices``)."""
        total, available = await asyncio.to_thread(self.memory.memory)
        gpus, prefix = await self.devices(backend)
        unified = is_unified(gpus, self.policy)
        reserve, keep = self.policy.reserve(total), self.policy.gpu_reserve_bytes
        devices = () if unified else tuple(
            Device(index=g.index, name=g.name, free=max(0, g.memory_total - g.memory_used - keep),
                   capacity=max(0, g.memory_total - keep)) for g in gpus)
        return NodeMemory(host_free=available - reserve - self._pending(loading or []), host_capacity=total - reserve,
                          gpus=devices, unified=unified, memory_total=total, memory_available=available,
                          device_prefix=prefix)

    async def admit(self, spec: LaunchSpec, loading: Callable[[], list[tuple[str, InstanceState, int | None]]],
                    wait_for: Callable[[Callable[[], bool], float], object]) -> FitReport | None:
        """Refuse ``spec`` unless it fits (or is forced); remember what it was admitted with.
        None for a model folder (vLLM, MLX): its check has no GGUF report (see the module text)."""
        if profile(spec.runtime).takes_folder:
            await self._admit_folder(spec, loading, wait_for)
            return None
        summary = await self.inspector.summary(spec.model_path)
        if summary.is_projector:
            raise InvalidModelFile(f"{os.path.basename(spec.model_path)} is a vision projector, not a model; "
                                   "pass it to a model with --mmproj")

        def others_loading() -> list[tuple[str, int | None]]:
            return [(i, pid) for i, state, pid in loading()
                    if state is InstanceState.STARTING and i != spec.instance_id]

        gpus, _prefix = await self.devices(spec.backend)
        if is_unified(gpus, self.policy) and others_loading():
            done = await wait_for(lambda: not others_loading(), self.policy.unified_wait_s)  # type: ignore[misc]
            if not done and not spec.force:
                raise StartInProgress("another model is still loading on this unified-memory node, and "
                                      "free memory is only known once it has; try again when it is ready")
        report = await self.report(summary, spec.settings, source=spec.model_path, loading=others_loading(),
                                   rpc_devices=sum(peer.devices for peer in spec.rpc_peers), backend=spec.backend)
        if spec.memory_budget_bytes is not None:
            report = _with_budget(report, spec.memory_budget_bytes)
        if not report.fits and not spec.force:
            advice = "Lower its memory budget" if spec.memory_budget_bytes is not None else \
                f"Lower ctx_size (at most {report.max_ctx_size} fits), offload fewer layers"
            raise InsufficientMemory(
                f"not enough memory to start {spec.instance_id}: {report.message}. {advice}, or start it with force.",
                details={"needed_bytes": report.estimate.host_bytes, "available_bytes": report.memory_available,
                         "reserve_bytes": report.reserve_bytes, "pending_bytes": report.pending_bytes,
                         "gpu_needed_bytes": report.estimate.gpu_bytes,
                         "gpu_budget_bytes": [g.budget_bytes for g in report.gpus],
                         "max_ctx_size": report.max_ctx_size, "max_gpu_layers": report.max_gpu_layers})
        if not report.fits:
            _LOGGER.warning("starting %s although it may not fit (forced): %s", spec.instance_id, report.message)
        self._admitted[spec.instance_id] = report.estimate.host_bytes
        return report


    async def _admit_folder(self, spec: LaunchSpec,
                            loading: Callable[[], list[tuple[str, InstanceState, int | None]]],
                            wait_for: Callable[[Callable[[], bool], float], object]) -> None:
        """A model folder's check (MLX, vLLM): see the module text."""
        path = spec.model_path if os.path.isabs(spec.model_path) or self.models_dir is None else \
            str(self.models_dir / spec.model_path)
        weights = await asyncio.to_thread(folder_weights, path)
        budget = spec.memory_budget_bytes

        def others_loading() -> list[tuple[str, int | None]]:
            return [(i, pid) for i, state, pid in loading()
                    if state is InstanceState.STARTING and i != spec.instance_id]

        gpus = await asyncio.to_thread(self.gpus.sample)
        runtime = profile(spec.runtime)
        unified = runtime.unified_memory or is_unified(gpus, self.policy)
        discrete = runtime.reserves_gpu_share and bool(gpus) and not unified
        if (unified or discrete) and others_loading():
            done = await wait_for(lambda: not others_loading(), self.policy.unified_wait_s)  # type: ignore[misc]
            if not done and not spec.force:
                where = "GPU" if discrete else "unified-memory"
                raise StartInProgress(f"another model is still loading on this {where} node, and free memory "
                                      "is only known once it has; try again when it is ready")
            gpus = await asyncio.to_thread(self.gpus.sample)
        total, available = await asyncio.to_thread(self.memory.memory)
        reserve = self.policy.reserve(total)
        pending = self._pending(others_loading())
        usable = available - reserve - pending
        label = runtime.label
        name = os.path.basename(os.path.normpath(spec.model_path))
        details: dict[str, object] = {"weights_bytes": weights, "margin_bytes": folder_margin(weights),
                                      "available_bytes": available, "reserve_bytes": reserve,
                                      "pending_bytes": pending}
        problems: list[str] = []
        host_need = 0
        if discrete:
            used = _visible_gpus(spec, gpus)
            tp = _tensor_parallel(spec)
            per_gpu = vllm_weights_per_gpu(weights, tp) + folder_margin(vllm_weights_per_gpu(weights, tp))
            needs = [vllm_gpu_need(g.memory_total, budget) for g in used]
            budgets = [max(0, g.memory_total - g.memory_used - self.policy.gpu_reserve_bytes) for g in used]
            details.update(gpu_needed_bytes=needs, gpu_budget_bytes=budgets, gpu_indices=[g.index for g in used],
                           weights_per_gpu_bytes=per_gpu)
            share = "its memory budget" if budget is not None else "vLLM's default share (90 % of the GPU)"
            if len(used) < tp:
                problems.append(f"it is split over {tp} GPUs (tensor_parallel_size) and this node has "
                                f"{len(used)} it may use")
            for gpu, need, have in zip(used, needs, budgets, strict=False):
                if need > have:
                    problems.append(f"GPU {gpu.index} needs {gib(need)} ({share}) of {gib(have)} usable")
            smallest = min(needs) if needs else 0
            if needs and per_gpu > smallest:
                problems.append(f"its weights ({gib(vllm_weights_per_gpu(weights, tp))} per GPU, "
                                f"{gib(per_gpu)} with the margin) do not fit in {share} of "
                                f"{gib(smallest)}: vLLM would have no room for its KV cache")
            summary = (f"{label} takes {share}: " + ", ".join(f"GPU {g.index} {gib(n)} of {gib(h)} usable"
                                                             for g, n, h in zip(used, needs, budgets, strict=False)))
        else:
            if runtime.reserves_gpu_share and unified and gpus and gpus[0].memory_total:
                host_need = vllm_gpu_need(gpus[0].memory_total, budget)
                basis = "its memory budget" if budget is not None else "vLLM's default share (90 %)"
            elif budget is not None:
                host_need, basis = budget, "its memory budget"
            elif runtime.reserves_gpu_share:  # on CPUs: vLLM's KV cache space beside the weights
                kv = _cpu_kv_bytes(spec.env.get("VLLM_CPU_KVCACHE_SPACE"))
                host_need, basis = folder_need(weights) + kv, f"weights, margin and {gib(kv)} of CPU KV cache"
            else:
                host_need, basis = folder_need(weights), "weights plus margin"
            details.update(needed_bytes=host_need)
            summary = _message(host_need, [], [], available, reserve, pending, host_need <= usable)
            summary = f"{summary} ({basis}; weights {gib(weights)})"
            if host_need > usable:
                problems.append(summary)
            if budget is not None and weights > budget:  # the budget is the user's word; the weights are fact
                problems.append(f"its weights ({gib(weights)}) do not fit in its memory budget of {gib(budget)}")
        if problems and not spec.force:
            advice = "Raise or lower its memory budget" if budget is not None else "Give it a memory budget"
            raise InsufficientMemory(f"not enough memory to start {spec.instance_id} ({label}, {name}): "
                                     f"{'; '.join(problems)}. {advice}, free memory, or start it with force.",
                                     details=details)
        if problems:
            _LOGGER.warning("starting %s although it may not fit (forced): %s", spec.instance_id, "; ".join(problems))
        _LOGGER.info("%s admitted: %s", spec.instance_id, summary)
        self._admitted[spec.instance_id] = host_need


def _cpu_kv_bytes(raw: str | None) -> int:
    """vLLM's ``VLLM_CPU_KVCACHE_SPACE`` (GiB) in bytes; its default when unset or unreadable."""
    try:
        return int(float(raw) * GiB) if raw else VLLM_CPU_KV_DEFAULT
    except ValueError:
        return VLLM_CPU_KV_DEFAULT


def _with_budget(report: FitReport, budget: int) -> FitReport:
    """The user's memory budget replaces the estimate: it alone is held against free system memory
    (less the reserve and what loading instances were promised); the GPU figures are not checked."""
    usable = report.memory_available - report.reserve_bytes - report.pending_bytes
    ok = budget <= usable
    message = _message(budget, [], [], report.memory_available, report.reserve_bytes, report.pending_bytes, ok)
    message = message.replace("needs ", "has a memory budget of ", 1) + \
        f" (the estimate from its GGUF file is {gib(report.estimate.host_bytes)})"
    estimate = report.estimate.model_copy(update={"host_bytes": budget})
    return report.model_copy(update={"estimate": estimate, "fits": ok, "message": message})


def _message(host: int, gpu: list[int], budgets: list[GpuBudget], available: int, reserve: int,
             pending: int, ok: bool) -> str:
    text = f"needs {gib(host)} of system memory; {gib(available)} available, {gib(reserve)} kept in reserve"
    if pending:
        text += f", {gib(pending)} promised to models still loading"
    for need, budget in zip(gpu, budgets, strict=False):
        text += f"; GPU {budget.index} needs {gib(need)} of {gib(budget.budget_bytes)} usable"
    return text + (" — fits" if ok else " — does not fit")
