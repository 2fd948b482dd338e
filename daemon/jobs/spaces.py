"""A tuning run's search space by runtime: llama.cpp's settings or vLLM's.

The run (``daemon.jobs.tuning``) does coordinate descent without knowing which runtime it tunes;
a space says which dimensions there are, what each varies, how a configuration is fingerprinted
(equal fingerprints run the same way and are measured once), how it is launched as a tuning
candidate (``LaunchSpec.tuning``), and where its settings go in a result. ``space_for`` picks by
``definition.runtime``; ``outline`` is what the plan endpoint shows and what a run starts from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.api import llamacpp, vllm
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import AgentStatus, LaunchSpec
from agent.api.runtimes import profile, settings_update
from agent.api.vllm import VllmSettings
from daemon.api.jobs import CandidateResult, TuneRequest, TuningResult
from daemon.api.models import LOCAL_NODE, ModelDefinition
from daemon.jobs.dimension import Dimension
from daemon.jobs.planner import (
    CONFIRM_SLOTS,
    DIMENSIONS,
    Machine,
    dimensions_for,
    effective_config,
    estimate_eta,
)
from daemon.jobs.vllm_dimensions import (
    DEFAULT_UTILIZATION,
    VLLM_DIMENSIONS,
    VllmMachine,
    canonical,
    chunked_prefill,
    is_pooling,
    read_model_facts,
    vllm_dimensions_for,
    vllm_effective_config,
)

Config = LlamaCppSettings | VllmSettings


class SearchSpace:
    """The llama.cpp space (the default); ``VllmSpace`` overrides what differs."""

    runtime = "llamacpp"
    dimensions: Mapping[str, Dimension[Any, Any]] = DIMENSIONS  # by name: what each varies, and why

    def __init__(self, definition: ModelDefinition, machine: Machine) -> None:
        self.definition = definition
        self.machine = machine

    # what the search varies
    def dims(self, request: TuneRequest) -> tuple[list[str], list[str]]:
        """(steps, notes on what is left out)."""
        dims = dimensions_for(request.search, request.dimensions, self.machine)
        notes = []
        if request.search == "full" and not self.machine.has_gpu:
            notes.append("GPU layers are not searched: this node has no GPU.")
        return dims, notes

    def goal(self, dim: str) -> tuple[str, str]:
        d = self.dimensions[dim]
        return d.goal, d.tradeoff

    def saved(self) -> Config:
        return self.definition.settings

    def variants(self, dim: str, best: Config, override: list[Any] | None) -> list[tuple[str, Config]]:
        assert isinstance(best, LlamaCppSettings)
        return list(DIMENSIONS[dim].variants(best, self.machine, override))

    # one configuration
    def fingerprint(self, config: Config) -> str:
        assert isinstance(config, LlamaCppSettings)
        d = self.definition
        return llamacpp.config_hash(config, d.model_path, d.served_name, d.extra_args)

    def effective(self, config: Config) -> str:
        assert isinstance(config, LlamaCppSettings)
        return effective_config(config)

    def slots(self, config: Config) -> int | None:
        assert isinstance(config, LlamaCppSettings)
        return config.parallel

    def spec(self, instance_id: str, config: Config) -> LaunchSpec:
        assert isinstance(config, LlamaCppSettings)
        d = self.definition
        return LaunchSpec(instance_id=instance_id, model_path=d.model_path, served_name=d.served_name,
                          settings=config, extra_args=d.extra_args, env=d.env, startup_timeout_s=d.startup_timeout_s,
                          tuning=True)

    def need_slot_ctx(self, tokens: int) -> None:
        """Later steps must leave every slot room for the baseline's longest prompt."""
        self.machine = Machine(self.machine.cpu_count, self.machine.has_gpu, tokens)

    # where settings go in a result
    def put(self, cand: CandidateResult, config: Config) -> None:
        assert isinstance(config, LlamaCppSettings)
        cand.settings = config

    def config_of(self, cand: CandidateResult) -> Config:
        return cand.settings

    def start_result(self, result: TuningResult) -> None:
        result.saved_settings = self.definition.settings

    def set_winner(self, result: TuningResult, cand: CandidateResult) -> None:
        result.winner_settings = cand.settings


class VllmSpace(SearchSpace):
    """vLLM's ``definition.vllm``, normalized first: no raw flag in extra_args overrides a candidate."""

    runtime = "vllm"
    dimensions = VLLM_DIMENSIONS

    def __init__(self, definition: ModelDefinition, machine: VllmMachine, rest: list[str]) -> None:
        super().__init__(definition, Machine(cpu_count=1, has_gpu=True))
        self.vllm_machine = machine
        self.rest = rest  # extra_args with every owned flag lifted out

    def dims(self, request: TuneRequest) -> tuple[list[str], list[str]]:
        return vllm_dimensions_for(request.search, request.dimensions, self.vllm_machine)

    def saved(self) -> Config:
        return self.vllm_machine.saved

    def variants(self, dim: str, best: Config, override: list[Any] | None) -> list[tuple[str, Config]]:
        assert isinstance(best, VllmSettings)
        return list(VLLM_DIMENSIONS[dim].variants(best, self.vllm_machine, override))

    def fingerprint(self, config: Config) -> str:
        assert isinstance(config, VllmSettings)
        d = self.definition
        return vllm.config_hash(d.image, canonical(config), d.model_path, d.served_name, self.rest,
                                d.memory_budget_gib)

    def effective(self, config: Config) -> str:
        assert isinstance(config, VllmSettings)
        return vllm_effective_config(config)

    def slots(self, config: Config) -> int | None:
        assert isinstance(config, VllmSettings)
        return config.max_num_seqs

    def spec(self, instance_id: str, config: Config) -> LaunchSpec:
        assert isinstance(config, VllmSettings)
        d = self.definition
        budget = None if d.memory_budget_gib is None else int(d.memory_budget_gib * (1 << 30))
        return LaunchSpec(instance_id=instance_id, runtime="vllm", model_path=d.model_path,
                          served_name=d.served_name, vllm=config, image=d.image, runtime_version=d.runtime_version,
                          extra_args=self.rest, env=d.env, startup_timeout_s=d.startup_timeout_s,
                          memory_budget_bytes=budget, tuning=True)

    def need_slot_ctx(self, tokens: int) -> None:
        """Max model len is never varied, so every candidate holds the baseline's prompts."""

    def put(self, cand: CandidateResult, config: Config) -> None:
        assert isinstance(config, VllmSettings)
        cand.vllm = config

    def config_of(self, cand: CandidateResult) -> Config:
        return cand.vllm if cand.vllm is not None else self.vllm_machine.saved

    def start_result(self, result: TuningResult) -> None:
        result.runtime = "vllm"
        result.saved_vllm = self.vllm_machine.saved

    def set_winner(self, result: TuningResult, cand: CandidateResult) -> None:
        result.winner_vllm = cand.vllm


def model_folder(definition: ModelDefinition) -> Path | None:
    """The model folder when the daemon can read it: an absolute path on the local node."""
    path = Path(definition.model_path)
    return path if definition.node == LOCAL_NODE and path.is_absolute() and path.is_dir() else None


def vllm_machine(definition: ModelDefinition, status: AgentStatus | None,
                 folder: Path | None = None) -> tuple[VllmMachine, list[str]]:
    """(the vLLM search's view of the model and its node, extra_args normalized)."""
    own = definition.runtime_settings
    saved, rest = vllm.normalize(own if isinstance(own, VllmSettings) else VllmSettings(), definition.extra_args)
    budget = definition.memory_budget_gib
    gpus = status.gpus if status is not None else []
    if budget is None and gpus:
        budget = DEFAULT_UTILIZATION * max(g.memory_total for g in gpus) / 2**30 or None
    if budget is not None:
        budget *= saved.tensor_parallel_size or 1  # the budget is per GPU; weights and KV are split
    facts = read_model_facts(folder if folder is not None else model_folder(definition))
    return VllmMachine(saved=saved, facts=facts, budget_gib=budget, chunked_prefill=chunked_prefill(rest),
                       pooling=is_pooling(rest, definition.tags)), rest


def space_for(definition: ModelDefinition, status: AgentStatus) -> SearchSpace:
    """The search space of ``definition.runtime``; MLX has none yet."""
    if isinstance(definition.runtime_settings, VllmSettings):
        machine, rest = vllm_machine(definition, status)
        return VllmSpace(definition, machine, rest)
    if not profile(definition.runtime).tunable:
        raise ValueError(f"tuning is not available for {definition.runtime} models yet")
    return SearchSpace(definition, Machine(cpu_count=status.cpu_count, has_gpu=bool(status.gpus)))


@dataclass(frozen=True)
class SpaceOutline:
    """A run before it measures anything: what the plan shows and what the run starts from."""

    dims: list[str]
    notes: list[str]
    steps: list[tuple[str, list[str]]]  # (dimension, value labels on top of the saved settings)
    candidates: int  # the saved configuration plus the search's candidates
    eta_s: float


def outline(request: TuneRequest, space: SearchSpace, pace: tuple[float, float]) -> SpaceOutline:
    dims, notes = space.dims(request)
    saved = space.saved()
    steps = [(d, [label for label, _ in space.variants(d, saved, request.values.get(d))]) for d in dims]
    candidates = 1 + min(sum(len(values) for _, values in steps), request.max_candidates)
    eta = estimate_eta(candidates, CONFIRM_SLOTS, *pace, request.suite.repetitions, request.confirm_repetitions)
    return SpaceOutline(dims, notes, steps, candidates, eta)


def applied(definition: ModelDefinition, result: TuningResult) -> ModelDefinition:
    """The saved definition with the winner's settings written onto it: only what the winner
    changed from the run's saved settings, so edits made since the run stay. A vLLM definition is
    normalized first, so no owned flag is left in ``extra_args`` to override what is applied."""
    own = definition.runtime_settings  # the job manager has checked it is the run's runtime
    if isinstance(own, VllmSettings):
        winner, saved = result.winner_vllm, result.saved_vllm or VllmSettings()
        if winner is None:
            raise ValueError("this run has no vLLM winner")
        current, rest = vllm.normalize(own, definition.extra_args)
        changed = {k: getattr(winner, k) for k in VllmSettings.model_fields if getattr(winner, k) != getattr(saved, k)}
        return definition.model_copy(update={**settings_update(current.model_copy(update=changed)), "extra_args": rest})
    if result.winner_settings is None or not isinstance(own, LlamaCppSettings):
        raise ValueError("this run has no llama.cpp winner")
    changed = {k: v for k, v in result.winner_settings.model_dump().items() if getattr(result.saved_settings, k) != v}
    return definition.model_copy(update=settings_update(own.model_copy(update=changed)))


def embedding_model(definition: ModelDefinition) -> bool:
    """Measured on the Embeddings preset: llama.cpp's embeddings switch, or a vLLM pooling runner."""
    own = definition.runtime_settings
    if isinstance(own, VllmSettings):
        try:
            _, rest = vllm.normalize(own, definition.extra_args)
        except ValueError:
            rest = definition.extra_args
        return is_pooling(rest, definition.tags)
    return isinstance(own, LlamaCppSettings) and own.embeddings
