"""The tuning search space for llama.cpp and its plan, as pure functions.

Dimensions, in the order coordinate descent visits them: CPU threads, batch and micro-batch,
parallel slots (the saved total context is kept, so each slot gets ``ctx_size ÷ parallel``), flash
attention, KV-cache types, GPU layers (only with a GPU). Quick search visits threads, parallel
slots and flash attention; full search visits every dimension. Each step varies one dimension on
top of the best configuration so far; configurations that run the same way (equal config hash)
are measured once.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.jobs import TuneRequest
from daemon.jobs.dimension import Dimension

QUICK = ("threads", "parallel", "flash_attn")
FULL = ("threads", "batch", "parallel", "flash_attn", "cache_type", "n_gpu_layers")
DEFAULT_START_S = 15.0
DEFAULT_BENCHMARK_S = 60.0
CONFIRM_SLOTS = 3  # the baseline and the top two


@dataclass(frozen=True)
class Machine:
    """What the search needs to know about the node and the model, without measuring."""

    cpu_count: int
    has_gpu: bool
    min_slot_ctx: int = 0  # a slot must still hold the longest prompt the preset sends


class LlamaCppDimension(Dimension[LlamaCppSettings, Machine]):
    """A llama.cpp dimension: ``batch`` and ``cache_type`` set two fields from one value."""

    def change(self, value: Any, machine: Machine) -> dict[str, Any]:
        if isinstance(value, dict):
            return value
        field = {"batch": "ubatch_size", "cache_type": "cache_type_k"}.get(self.name, self.name)
        change = {field: value}
        if self.name == "cache_type":
            change["cache_type_v"] = value
        return change


def _threads(best: LlamaCppSettings, m: Machine) -> list[dict[str, Any]]:
    n = max(1, m.cpu_count)
    values = {1, max(1, n // 2), n} if n <= 4 else {max(1, n // 4), n // 2, n}
    return [{"threads": v} for v in sorted(values)]


def _batch(best: LlamaCppSettings, m: Machine) -> list[dict[str, Any]]:
    pairs = ((512, 128), (1024, 256), (2048, 512), (4096, 1024))
    return [{"batch_size": b, "ubatch_size": u} for b, u in pairs]


def _parallel(best: LlamaCppSettings, m: Machine) -> list[dict[str, Any]]:
    out = []
    for p in (1, 2, 4, 8, 16):
        if best.ctx_size and m.min_slot_ctx and best.ctx_size // p < m.min_slot_ctx:
            continue  # the slot would be too small for the prompts this preset sends
        out.append({"parallel": p})
    return out


def _flash_attn(best: LlamaCppSettings, m: Machine) -> list[dict[str, Any]]:
    return [{"flash_attn": "on"}, {"flash_attn": "off"}]


def _cache_type(best: LlamaCppSettings, m: Machine) -> list[dict[str, Any]]:
    # A quantised V cache needs flash attention on; the K cache can be quantised alone.
    quant_v = "q8_0" if best.flash_attn == "on" else None
    return [{"cache_type_k": None, "cache_type_v": None}, {"cache_type_k": "q8_0", "cache_type_v": quant_v}]


def _gpu_layers(best: LlamaCppSettings, m: Machine) -> list[dict[str, Any]]:
    return [{"n_gpu_layers": 0}, {"n_gpu_layers": 999}] if m.has_gpu else []


DIMENSIONS: dict[str, LlamaCppDimension] = {d.name: d for d in (
    LlamaCppDimension("threads", "Match CPU threads to the cores that do the work.",
                      "Too many threads contend with each other and with the rest of the machine.", _threads),
    LlamaCppDimension("batch", "Size the prompt batches to the hardware.",
                      "Bigger batches process prompts faster but take more memory.", _batch),
    LlamaCppDimension("parallel", "Serve more requests at once.",
                      "More slots share the same context, so each request gets less of it.", _parallel),
    LlamaCppDimension("flash_attn", "Use the fused attention kernel.",
                      "Faster and leaner on most hardware; slower on some CPUs.", _flash_attn),
    LlamaCppDimension("cache_type", "Store the KV cache in 8 bits.",
                      "Halves the cache memory; may cost a little speed or quality.", _cache_type),
    LlamaCppDimension("n_gpu_layers", "Put the right number of layers on the GPU.",
                      "All layers on the GPU is fastest when they fit; none frees the GPU.", _gpu_layers),
)}


def dimensions_for(search: str, explicit: Sequence[str] | None, machine: Machine) -> list[str]:
    """The steps of a run: explicit ones, else quick or full; GPU layers only with a GPU."""
    names = list(explicit) if explicit else list(QUICK if search == "quick" else FULL)
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown:
        raise ValueError(f"unknown tuning dimension(s) {unknown}; known: {', '.join(DIMENSIONS)}")
    return [n for n in names if n != "n_gpu_layers" or machine.has_gpu]


def effective_config(settings: LlamaCppSettings) -> str:
    """One line of the settings that differ from the runtime's defaults."""
    values = settings.model_dump(exclude_none=True, exclude_defaults=True)
    return " ".join(f"{k}={v}" for k, v in values.items()) or "runtime defaults"


def estimate_eta(candidates: int, confirmations: int, start_s: float, benchmark_s: float,
                 repetitions: int, confirm_repetitions: int) -> float:
    """Seconds: each candidate starts and runs the suite; each confirmation runs it longer."""
    confirm_bench = benchmark_s * confirm_repetitions / max(1, repetitions)
    return candidates * (start_s + benchmark_s) + confirmations * (start_s + confirm_bench)


def count_candidates(dims: Sequence[str], saved: LlamaCppSettings, machine: Machine,
                     values: dict[str, list[Any]], limit: int) -> int:
    """Upper estimate of the candidates a run measures (every step on top of the saved settings)."""
    total = sum(len(DIMENSIONS[d].variants(saved, machine, values.get(d))) for d in dims)
    return min(total, limit)


def pace_from_history(starts: Sequence[float], benches: Sequence[float],
                      last_benchmark_s: float | None) -> tuple[float, float]:
    """(start, benchmark) seconds to plan with: the last tuning run's medians, else the last
    benchmark's duration, else the defaults."""
    start = statistics.median(starts) if starts else DEFAULT_START_S
    if benches:
        return start, statistics.median(benches)
    return start, last_benchmark_s or DEFAULT_BENCHMARK_S


@dataclass(frozen=True)
class TuneOutline:
    """A tuning run before it measures anything: what ``POST /api/jobs/tune/plan`` shows and what
    the run itself starts from (one computation for both)."""

    machine: Machine
    dims: list[str]
    candidates: int  # the saved configuration plus the search's candidates
    eta_s: float


def outline_tune(request: TuneRequest, saved: LlamaCppSettings, machine: Machine,
                 pace: tuple[float, float]) -> TuneOutline:
    dims = dimensions_for(request.search, request.dimensions, machine)
    candidates = 1 + count_candidates(dims, saved, machine, request.values, request.max_candidates)
    eta = estimate_eta(candidates, CONFIRM_SLOTS, *pace, request.suite.repetitions, request.confirm_repetitions)
    return TuneOutline(machine, dims, candidates, eta)
