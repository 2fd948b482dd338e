"""Workload presets: which workloads a preset runs, how its score is weighted, which guards hold.

Metric names are the suite's (``daemon.jobs.benchmark``): ``single_*`` is concurrency 1, ``top_*``
the highest level of the run, ``max_*`` the configuration's own slot count, ``long_*`` and
``longest_*`` the cold long prompts, ``cached_ttft_ms`` the same long prompt again.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.api.jobs import PRESETS, PresetId, PresetInfo
from daemon.jobs.scoring import Component, Guard

# Workloads a preset may ask for.
CHAT, LONG, LONGEST, CACHED, MAX_LEVEL, TOOLS, OBJECTIVE, EMBEDDINGS = (
    "chat", "long", "longest", "cached", "max_level", "tools", "objective", "embeddings")


@dataclass(frozen=True)
class Preset:
    info: PresetInfo
    workloads: frozenset[str]
    components: tuple[Component, ...]
    guards: tuple[Guard, ...]

    @property
    def id(self) -> PresetId:
        return self.info.id


_SHORT_TTFT = (
    Guard("single_ttft_p95_ms", "max", 1000.0, "short-prompt TTFT p95 at N=1 ≤ 1 s"),
    Guard("top_ttft_p95_ms", "max", 3000.0, "short-prompt TTFT p95 at the top level ≤ 3 s"),
)
_LONG_TTFT = Guard("long_ttft_ms", "max_ratio", 1.25, "long-prompt TTFT ≤ baseline + 25 %")
_NO_ERRORS = Guard("error_rate", "max", 0.0, "no failed requests")
_OBJECTIVE = Guard("objective_score", "min_ratio", 1.0, "objective answers ≥ baseline")


def _info(preset_id: PresetId) -> PresetInfo:
    return next(p for p in PRESETS if p.id == preset_id)


_PRESETS: dict[str, Preset] = {
    "interactive": Preset(
        _info("interactive"), frozenset({CHAT, LONG, OBJECTIVE}),
        (Component("single_tps", 0.5), Component("top_agg_tps", 0.2),
         Component("long_ttft_ms", 0.3, higher_is_better=False)),
        (*_SHORT_TTFT, _LONG_TTFT, _NO_ERRORS, _OBJECTIVE)),
    "agents": Preset(
        _info("agents"), frozenset({CHAT, LONG, CACHED, TOOLS, OBJECTIVE}),
        (Component("single_tps", 0.25), Component("top_agg_tps", 0.3),
         Component("long_ttft_ms", 0.15, higher_is_better=False),
         Component("cached_ttft_ms", 0.3, higher_is_better=False)),
        (*_SHORT_TTFT, _LONG_TTFT, _NO_ERRORS, _OBJECTIVE,
         Guard("tool_valid", "min", 1.0, "every tool call valid against its schema"))),
    "throughput": Preset(
        _info("throughput"), frozenset({CHAT, MAX_LEVEL, OBJECTIVE}),
        (Component("top_agg_tps", 0.4), Component("max_agg_tps", 0.6)),
        (_NO_ERRORS, _OBJECTIVE)),
    "long-documents": Preset(
        _info("long-documents"), frozenset({CHAT, LONG, LONGEST, OBJECTIVE}),
        (Component("single_tps", 0.3), Component("long_ttft_ms", 0.35, higher_is_better=False),
         Component("longest_ttft_ms", 0.35, higher_is_better=False)),
        (_NO_ERRORS, _OBJECTIVE)),
    "embeddings": Preset(
        _info("embeddings"), frozenset({EMBEDDINGS}),
        (Component("emb_single_tps", 0.4), Component("emb_top_tps", 0.6)),
        (Guard("emb_valid", "min", 1.0, "valid vectors"),
         Guard("emb_top_p95_ms", "max_ratio", 2.0, "embedding latency p95 at the top level ≤ 2× baseline"),
         _NO_ERRORS)),
}


def preset(preset_id: str) -> Preset:
    """The preset with that id; ValueError names the known ones."""
    try:
        return _PRESETS[preset_id]
    except KeyError:
        raise ValueError(f"unknown preset '{preset_id}'; known: {', '.join(_PRESETS)}") from None


def preset_for_model(preset_id: str, embeddings: bool) -> Preset:
    """An embedding model is always measured on Embeddings, a generation model never."""
    if embeddings and preset_id != "embeddings":
        return _PRESETS["embeddings"]
    if not embeddings and preset_id == "embeddings":
        raise ValueError("the Embeddings preset needs a model started with embeddings on")
    return preset(preset_id)
