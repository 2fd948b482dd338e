"""The benchmark suite: what a preset measures, run against one runtime, reduced to named metrics.

Each repetition runs every timed workload once (the concurrency levels, the cold long prompt and
the same prompt again, the longest prompt, embeddings); a metric's figure is the median over the
repetitions. Tool calls and objective questions are checked once, untimed. Metric names:
``n{N}_tps`` (per-request tokens ÷ (total − TTFT), median over the requests), ``n{N}_agg_tps``
(tokens ÷ wall), ``n{N}_ttft_p50_ms`` / ``_p95_ms`` (nearest rank), with ``single_*`` (N=1),
``top_*`` (the highest level) and ``max_agg_tps`` (N = the slots) as aliases the presets score.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from daemon.api.jobs import CheckResult, LevelResult, PrefillResult, SuiteOptions
from daemon.jobs import presets as wl
from daemon.jobs.calls import (
    ChatTiming,
    EmbeddingTiming,
    RuntimeTarget,
    slot_facts,
    timed_chat,
    timed_embeddings,
)
from daemon.jobs.checks import run_objective, run_tool_checks
from daemon.jobs.presets import Preset
from daemon.jobs.scoring import median_metrics, percentile
from daemon.jobs.workloads import EMBEDDING_TEXTS, chat_prompt, long_prompt

LONG_MARGIN_TOKENS = 64
LONG_BUDGET_SHARE = 0.8  # prompt sizes are estimated from words: stay clear of the slot's end
MAX_LEVEL_CAP = 64
PROMPT_SEEN_SHARE = 0.25  # fewer prompt tokens than this share of those sent means the prompt was lost

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class SuitePlan:
    workloads: frozenset[str]
    levels: tuple[int, ...]
    max_level: int | None
    repetitions: int
    max_tokens: int
    long_tokens: int | None
    longest_tokens: int | None
    objective_questions: int
    tool_cases: int
    warmup: bool

    @property
    def timed_steps(self) -> int:
        per_rep = len(self.levels) + (self.max_level is not None and self.max_level not in self.levels)
        per_rep += (self.long_tokens is not None) + (self.longest_tokens is not None)
        return per_rep * self.repetitions + self.warmup + bool(self.objective_questions) + bool(self.tool_cases)


def plan_suite(preset: Preset, options: SuiteOptions, slots: int | None, ctx_per_slot: int | None,
               levels: list[int] | None = None) -> SuitePlan:
    """Which workloads and sizes one run measures, from the preset, the options and the runtime's slots."""
    cap = max(1, slots or 1)
    chosen = tuple(sorted(set(levels))) if levels else tuple(sorted({min(n, cap) for n in options.levels}))
    max_level = min(cap, MAX_LEVEL_CAP) if wl.MAX_LEVEL in preset.workloads else None
    budget = int((ctx_per_slot - LONG_MARGIN_TOKENS) * LONG_BUDGET_SHARE) if ctx_per_slot else None
    wants_long = bool({wl.LONG, wl.CACHED, wl.LONGEST} & preset.workloads) and options.long_prompt_tokens > 0
    size = min(options.long_prompt_tokens, budget) if budget is not None else options.long_prompt_tokens
    long_tokens = size if wants_long and size > 0 else None
    longest = budget if wl.LONGEST in preset.workloads and budget and long_tokens and budget > long_tokens else None
    generation = wl.EMBEDDINGS not in preset.workloads
    return SuitePlan(
        workloads=preset.workloads, levels=chosen, max_level=max_level, repetitions=options.repetitions,
        max_tokens=options.max_tokens, long_tokens=long_tokens if generation else None,
        longest_tokens=longest if generation else None,
        objective_questions=options.objective_questions if wl.OBJECTIVE in preset.workloads else 0,
        tool_cases=options.tool_cases if generation else 0,
        warmup=options.warmup)


def level_metrics(n: int, timings: list[ChatTiming], wall_s: float) -> dict[str, float]:
    """The figures of one batch of ``n`` concurrent requests."""
    ok = [t for t in timings if t.ok]
    out = {f"n{n}_requests": float(len(timings)), f"n{n}_errors": float(len(timings) - len(ok))}
    rates = [r for r in (t.decode_tps for t in ok) if r is not None]
    if rates:
        out[f"n{n}_tps"] = float(statistics.median(rates))
    tokens = sum(t.completion_tokens for t in ok)
    out[f"n{n}_tokens"] = float(tokens)
    if tokens and wall_s > 0:
        out[f"n{n}_agg_tps"] = tokens / wall_s
    ttfts = [t.ttft_s * 1000 for t in ok if t.ttft_s is not None]
    if ttfts:
        out[f"n{n}_ttft_p50_ms"] = percentile(ttfts, 50)
        out[f"n{n}_ttft_p95_ms"] = percentile(ttfts, 95)
    return out


def with_roles(metrics: dict[str, float], plan: SuitePlan) -> dict[str, float]:
    """Add the aliases the presets score (single, top, max) and the error rate."""
    out = dict(metrics)
    prefix = "emb_n" if wl.EMBEDDINGS in plan.workloads else "n"
    role_prefix = "emb_" if prefix == "emb_n" else ""
    for role, level in (("single", 1), ("top", max(plan.levels))):
        if level not in plan.levels:
            continue
        for suffix in ("tps", "agg_tps", "ttft_p50_ms", "ttft_p95_ms", "p95_ms"):
            if f"{prefix}{level}_{suffix}" in metrics:
                out[f"{role_prefix}{role}_{suffix}"] = metrics[f"{prefix}{level}_{suffix}"]
    if plan.max_level is not None and f"n{plan.max_level}_agg_tps" in metrics:
        out["max_agg_tps"] = metrics[f"n{plan.max_level}_agg_tps"]
    requests = sum(v for k, v in metrics.items() if k.endswith("_requests"))
    errors = sum(v for k, v in metrics.items() if k.endswith("_errors"))
    if requests:
        out["error_rate"] = errors / requests
    return out


@dataclass
class SuiteOutcome:
    levels: list[LevelResult]
    prefill: PrefillResult | None
    metrics: dict[str, float]
    repetitions: list[dict[str, float]]
    errors: list[str]
    tool_calls: CheckResult | None = None
    objective: CheckResult | None = None


class SuiteRunner:
    """Runs one ``SuitePlan`` against one runtime."""

    def __init__(self, target: RuntimeTarget, plan: SuitePlan, progress: Progress | None = None,
                 rng: random.Random | None = None) -> None:
        self.target = target
        self.plan = plan
        self._progress = progress
        self._rng = rng or random.Random()
        self._done = 0
        self.errors: list[str] = []

    def _step(self, text: str) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress(text, min(1.0, self._done / max(1, self.plan.timed_steps)))

    def _note_errors(self, messages: list[str | None]) -> None:
        for message in messages:
            if message and len(self.errors) < 20 and message not in self.errors:
                self.errors.append(message)

    async def run(self) -> SuiteOutcome:
        embeddings = wl.EMBEDDINGS in self.plan.workloads
        if self.plan.warmup:
            await (self._embed_batch(1, "warmup") if embeddings else self._chat_batch(1, "warmup", 8))
            self._step("warm-up")
        reps = [await self._repetition(r, embeddings) for r in range(self.plan.repetitions)]
        medians = median_metrics(reps)
        tools = await run_tool_checks(self.target, self.plan.tool_cases) if self.plan.tool_cases else None
        if tools is not None:
            medians["tool_valid"] = tools.passed / tools.total
            self._step("tool calls")
        objective = await run_objective(self.target, self.plan.objective_questions) \
            if self.plan.objective_questions else None
        if objective is not None:
            medians["objective_score"] = objective.passed / objective.total
            self._step("objective questions")
        return SuiteOutcome(levels=self._levels(medians), prefill=_prefill(medians), metrics=medians,
                            repetitions=reps, errors=self.errors, tool_calls=tools, objective=objective)

    async def _repetition(self, rep: int, embeddings: bool) -> dict[str, float]:
        metrics: dict[str, float] = {}
        levels = list(self.plan.levels)
        if self.plan.max_level is not None and self.plan.max_level not in levels:
            levels.append(self.plan.max_level)
        for n in levels:
            tag = f"r{rep}n{n}-{self._rng.randrange(1 << 30):x}"
            metrics.update(await (self._embed_level(n, tag) if embeddings else self._chat_level(n, tag)))
            self._step(f"repetition {rep + 1}: {n} at once")
        for key, tokens in (("long", self.plan.long_tokens), ("longest", self.plan.longest_tokens)):
            if tokens:
                metrics.update(await self._long(key, tokens, cached=key == "long"))
                self._step(f"repetition {rep + 1}: {key} prompt")
        return with_roles(metrics, self.plan)

    async def _chat_batch(self, n: int, tag: str, max_tokens: int) -> tuple[list[ChatTiming], float]:
        started = time.perf_counter()
        timings = await asyncio.gather(*(
            timed_chat(self.target, [{"role": "user", "content": chat_prompt(i, tag)}], max_tokens)
            for i in range(n)))
        return list(timings), time.perf_counter() - started

    async def _chat_level(self, n: int, tag: str) -> dict[str, float]:
        timings, wall = await self._chat_batch(n, tag, self.plan.max_tokens)
        self._note_errors([t.error for t in timings])
        return level_metrics(n, timings, wall)

    async def _long(self, key: str, tokens: int, cached: bool) -> dict[str, float]:
        messages = [{"role": "user", "content": long_prompt(tokens, self._rng)}]
        cold = await timed_chat(self.target, messages, 1)
        self._note_errors([cold.error])
        out = {f"{key}_requests": 1.0, f"{key}_errors": 0.0 if cold.ok else 1.0}
        if cold.ok and cold.prompt_tokens < tokens * PROMPT_SEEN_SHARE:
            # A chat template that drops the messages makes every prompt a few tokens long.
            self._note_errors([(f"{key} prompt: the runtime counted {cold.prompt_tokens} prompt tokens of about "
                                f"{tokens} sent; is its chat template dropping the messages?")])
        if cold.ok and cold.ttft_s:
            out[f"{key}_ttft_ms"] = cold.ttft_s * 1000
            out[f"{key}_prompt_tokens"] = float(cold.prompt_tokens)
            out[f"{key}_prefill_tps"] = cold.prompt_tokens / cold.ttft_s
        if cached:
            warm = await timed_chat(self.target, messages, 1)
            self._note_errors([warm.error])
            if warm.ok and warm.ttft_s:
                out["cached_ttft_ms"] = warm.ttft_s * 1000
        return out

    async def _embed_batch(self, n: int, tag: str) -> tuple[list[EmbeddingTiming], float]:
        started = time.perf_counter()
        results = await asyncio.gather(*(
            timed_embeddings(self.target, [f"{text} ({tag}-{i})" for text in EMBEDDING_TEXTS]) for i in range(n)))
        return list(results), time.perf_counter() - started

    async def _embed_level(self, n: int, tag: str) -> dict[str, float]:
        results, wall = await self._embed_batch(n, tag)
        ok = [r for r in results if r.ok]
        self._note_errors([r.error for r in results])
        out = {f"emb_n{n}_requests": float(n), f"emb_n{n}_errors": float(n - len(ok))}
        tokens = sum(r.prompt_tokens for r in ok)
        if ok and wall > 0:
            out[f"emb_n{n}_tps"] = tokens / wall if tokens else len(ok) * len(EMBEDDING_TEXTS) / wall
            out[f"emb_n{n}_p95_ms"] = percentile([r.latency_s * 1000 for r in ok], 95)
            out["emb_valid"] = sum(1 for r in ok if r.valid) / n
        return out

    def _levels(self, medians: dict[str, float]) -> list[LevelResult]:
        prefix = "emb_n" if wl.EMBEDDINGS in self.plan.workloads else "n"
        levels = sorted(set(self.plan.levels) | ({self.plan.max_level} if self.plan.max_level else set()))
        out = []
        for n in levels:
            def get(suffix: str, n: int = n) -> float | None:
                return medians.get(f"{prefix}{n}_{suffix}")
            out.append(LevelResult(concurrency=n, requests=int(get("requests") or 0), errors=int(get("errors") or 0),
                                   per_request_tps=get("tps"), aggregate_tps=get("agg_tps"),
                                   ttft_p50_ms=get("ttft_p50_ms"), ttft_p95_ms=get("ttft_p95_ms") or get("p95_ms")))
        return out


def _prefill(medians: dict[str, float]) -> PrefillResult | None:
    if "long_ttft_ms" not in medians:
        return None
    return PrefillResult(prompt_tokens=int(medians.get("long_prompt_tokens", 0)), ttft_ms=medians["long_ttft_ms"],
                         prefill_tps=medians.get("long_prefill_tps", 0.0), cached_ttft_ms=medians.get("cached_ttft_ms"))


async def measure(target: RuntimeTarget, preset: Preset, options: SuiteOptions, *, fallback_slots: int | None,
                  progress: Progress | None = None, fixed: SuitePlan | None = None,
                  rng: random.Random | None = None) -> tuple[SuiteOutcome, SuitePlan, int | None]:
    """Read the runtime's slots, plan the suite (or keep a run's ``fixed`` sizes) and run it.

    A tuning run fixes the levels and prompt sizes from its baseline, so that a candidate with
    smaller slots is not measured on shorter prompts.
    """
    slots, ctx_per_slot = await slot_facts(target)
    plan = plan_suite(preset, options, slots or fallback_slots, ctx_per_slot)
    if fixed is not None:
        plan = dataclasses.replace(plan, levels=fixed.levels, long_tokens=fixed.long_tokens,
                                   longest_tokens=fixed.longest_tokens)
    outcome = await SuiteRunner(target, plan, progress, rng).run()
    return outcome, plan, slots or fallback_slots
