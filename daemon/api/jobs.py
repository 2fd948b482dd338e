"""Wire contracts of the jobs API (``/api/jobs``): benchmarks and tuning runs of one model.

A job measures a model on its node (benchmark) or searches its llama.cpp settings for ones that
beat the saved settings (tune). Results are stored by the daemon as they are sent here; fields
are additive, and ``schema_version`` says which shape a stored result has.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.api.llamacpp import LlamaCppSettings
from agent.api.runtimes import RuntimeId
from agent.api.vllm import VllmSettings

JOB_SCHEMA_VERSION = 1
PresetId = Literal["interactive", "agents", "throughput", "long-documents", "embeddings"]
SearchMode = Literal["quick", "full"]
JobKind = Literal["benchmark", "tune"]
TuneDimension = Literal["threads", "batch", "parallel", "flash_attn", "cache_type", "n_gpu_layers",  # llama.cpp
                        "kv_cache_dtype", "prefix_caching", "max_num_seqs", "max_num_batched_tokens",  # vLLM
                        "speculative", "async_scheduling"]


class JobState(str, Enum):
    DRAINING = "draining"
    RUNNING = "running"
    RESTORING = "restoring"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class PresetInfo(BaseModel):
    """What a workload preset measures and optimises, for pickers and plan previews."""

    id: PresetId
    label: str
    description: str


PRESETS: tuple[PresetInfo, ...] = (
    PresetInfo(id="interactive", label="Interactive chat",
               description="One person chatting: fast single-user generation and a quick first token."),
    PresetInfo(id="agents", label="Agents & tools",
               description="Many agent calls: throughput under load, repeated prompts, valid tool calls."),
    PresetInfo(id="throughput", label="Throughput",
               description="Batch work: the most tokens per second over many parallel requests."),
    PresetInfo(id="long-documents", label="Long documents",
               description="Long prompts: fast prompt processing at the context the model is given."),
    PresetInfo(id="embeddings", label="Embeddings",
               description="Embedding models: input tokens per second, one request and many at once."),
)


class SuiteOptions(BaseModel):
    """How much a benchmark measures. The defaults are the full suite; tests and quick runs shrink it."""

    levels: list[int] = Field(default_factory=lambda: [1, 4, 8, 16], min_length=1,
                              description="Concurrency levels, capped by the model's slots.")
    repetitions: int = Field(default=3, ge=1, le=20, description="Runs per level; figures are medians.")
    max_tokens: int = Field(default=128, ge=1, le=8192, description="Output tokens per request (ignore_eos).")
    long_prompt_tokens: int = Field(default=4096, ge=0, le=1_048_576,
                                    description="Long-prompt size, capped by the context per slot; 0 skips it.")
    objective_questions: int = Field(default=8, ge=0, le=8, description="Objective questions asked (0 skips).")
    tool_cases: int = Field(default=3, ge=0, le=3, description="Tool-call cases checked (0 skips).")
    warmup: bool = True
    drain_timeout_s: float = Field(default=120.0, ge=0, le=3600,
                                   description="How long to wait for in-flight requests before measuring.")
    request_timeout_s: float = Field(default=600.0, gt=0, description="Read timeout of one benchmark request.")
    overhead_rounds: int = Field(default=0, ge=0, le=50, description="Rounds of the same request sent straight "
                                 "to the runtime (or through the node's agent), and through the router, "
                                 "interleaved: what MirbadLLM adds (0 skips).")


class BenchmarkRequest(BaseModel):
    model: str
    preset: PresetId = "interactive"
    suite: SuiteOptions = Field(default_factory=SuiteOptions)


class TuneRequest(BaseModel):
    model: str
    preset: PresetId = "interactive"
    search: SearchMode = "quick"
    dimensions: list[TuneDimension] | None = Field(default=None, description="Explicit steps; else by search.")
    values: dict[str, list[Any]] = Field(default_factory=dict,
                                         description="Candidate values per dimension, replacing the built-in ones.")
    suite: SuiteOptions = Field(default_factory=lambda: SuiteOptions(levels=[1, 16]))
    confirm_repetitions: int = Field(default=5, ge=2, le=20)
    max_candidates: int = Field(default=40, ge=1, le=200)
    min_gain: float = Field(default=0.05, ge=0, le=10, description="A winner beats the baseline by at least this.")
    seed: int | None = Field(default=None, description="Seed of the confirmation order (random when unset).")


class LevelResult(BaseModel):
    """One concurrency level: medians over the repetitions."""

    concurrency: int
    requests: int
    errors: int = 0
    per_request_tps: float | None = None
    aggregate_tps: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None


class PrefillResult(BaseModel):
    prompt_tokens: int
    ttft_ms: float
    prefill_tps: float
    cached_ttft_ms: float | None = None


class CheckResult(BaseModel):
    """Tool calls or objective questions: how many passed, with what was answered."""

    total: int
    passed: int
    details: list[str] = Field(default_factory=list)


OverheadPathName = Literal["runtime", "agent", "router"]


class OverheadPath(BaseModel):
    """One way to the model: straight to its runtime, through its node's agent, through the router."""

    path: OverheadPathName
    requests: int
    errors: int = 0
    ttft_p50_ms: float | None = None
    tokens_per_s_p50: float | None = None


class OverheadResult(BaseModel):
    """What each hop adds, measured with the same requests interleaved (daemon.jobs.overhead)."""

    rounds: int
    max_tokens: int
    baseline: OverheadPathName = Field(description="The nearest path to the runtime this daemon can reach: "
                                       "runtime (this machine) or agent (another node).")
    paths: list[OverheadPath]
    ttft_ratio: float | None = Field(default=None, description="Router ÷ baseline, TTFT p50 (1.0: nothing added).")
    tps_ratio: float | None = Field(default=None, description="Router ÷ baseline, tokens per second p50.")


class JobResult(BaseModel):
    """What every stored result has, a benchmark's or a tuning run's: enough to list it as a finished job."""

    schema_version: int = JOB_SCHEMA_VERSION
    kind: JobKind
    model: str
    node: str = "local"
    preset: PresetId = "interactive"
    stamp: str
    state: JobState = JobState.SUCCEEDED
    started_at: float
    finished_at: float | None = None
    noisy: list[str] = Field(default_factory=list)
    error: str | None = None


class BenchmarkResult(JobResult):
    kind: Literal["benchmark"] = "benchmark"
    served_name: str = ""
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings, description="Read back from the process.")
    runtime: RuntimeId = Field(default="llamacpp", description="The runtime the measured instance ran on.")
    vllm: VllmSettings | None = Field(default=None, description="vLLM's settings read back from the container's "
                                                                  "Cmd (a vLLM model's run).")
    extra_args: list[str] = Field(default_factory=list, description="The flags the read-back kept as they were.")
    gpu_memory_utilization: float | None = Field(default=None, description="vLLM's share of the GPU it ran with.")
    argv: list[str] = Field(default_factory=list)
    config_hash: str | None = None
    slots: int | None = None
    levels: list[LevelResult] = Field(default_factory=list)
    prefill: PrefillResult | None = None
    tool_calls: CheckResult | None = None
    objective: CheckResult | None = None
    metrics: dict[str, float] = Field(default_factory=dict, description="Medians; what scores are made of.")
    repetitions: list[dict[str, float]] = Field(default_factory=list)
    request_errors: list[str] = Field(default_factory=list, description="The first distinct request failures.")
    overhead: OverheadResult | None = Field(default=None, description="What the router (and the agent) add.")
    duration_s: float | None = None


class CandidateResult(BaseModel):
    index: int = Field(description="0 is the baseline (the saved settings).")
    instance_id: str = ""
    step: str = Field(description="baseline, a dimension, or confirmation")
    description: str = ""
    settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings, description="llama.cpp's settings.")
    vllm: VllmSettings | None = Field(default=None, description="vLLM's normalized settings (a vLLM model's run).")
    effective_config: str = ""
    config_hash: str = ""
    status: Literal["measured", "rejected", "failed", "duplicate", "skipped", "cancelled"] = "measured"
    error: str | None = None
    score: float | None = None
    score_min: float | None = None
    score_max: float | None = None
    guard_failures: list[str] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    start_seconds: float | None = None
    benchmark_seconds: float | None = None


class TuningResult(JobResult):
    kind: Literal["tune"] = "tune"
    search: SearchMode = "quick"
    runtime: RuntimeId = "llamacpp"
    saved_settings: LlamaCppSettings = Field(default_factory=LlamaCppSettings)
    saved_vllm: VllmSettings | None = Field(default=None, description="vLLM: the saved settings, normalized.")
    saved_hash: str = ""
    dimensions: list[str] = Field(default_factory=list)
    levels: list[int] = Field(default_factory=list)
    guards: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    candidates: list[CandidateResult] = Field(default_factory=list)
    confirmation: list[CandidateResult] = Field(default_factory=list)
    winner: int | None = Field(default=None, description="Index of the winning candidate; None keeps the saved settings.")
    winner_settings: LlamaCppSettings | None = None
    winner_vllm: VllmSettings | None = Field(default=None, description="vLLM: the winner's normalized settings.")
    gain: float | None = Field(default=None, description="Winner's confirmed score over the baseline's (1.0 = same).")
    decision: str = ""
    restore_note: str | None = None


class ScorePoint(BaseModel):
    label: str
    score: float | None


class JobView(BaseModel):
    """A job as the app shows it; ``result`` only when asked for one job."""

    id: str
    kind: JobKind
    model: str
    node: str = "local"
    preset: PresetId = "interactive"
    search: SearchMode | None = None
    state: JobState
    started_at: float
    finished_at: float | None = None
    progress: float = Field(default=0.0, ge=0.0, le=1.0)
    phase: str = ""
    message: str = ""
    candidate: str | None = Field(default=None, description="What the current candidate tries, and its cost.")
    candidates_done: int = 0
    candidates_total: int = 0
    eta_s: float | None = None
    scores: list[ScorePoint] = Field(default_factory=list)
    noisy: list[str] = Field(default_factory=list)
    error: str | None = None
    summary: dict[str, float] = Field(default_factory=dict)
    result: BenchmarkResult | TuningResult | None = None


class PlanStep(BaseModel):
    dimension: str
    values: list[str]
    goal: str
    tradeoff: str


class TuningPlan(BaseModel):
    """What a tuning run would try, and about how long it would take."""

    model: str
    preset: PresetId
    search: SearchMode
    steps: list[PlanStep]
    candidates: int
    confirmations: int
    start_s: float
    benchmark_s: float
    eta_s: float
    notes: list[str] = Field(default_factory=list)
