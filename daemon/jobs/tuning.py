"""A tuning run: coordinate descent over a runtime's settings, then a confirmation stage.

The search space (``daemon.jobs.spaces``: llama.cpp's settings or vLLM's normalized ``vllm``
settings, by ``definition.runtime``) says what each step varies and how a candidate launches.

Every configuration, the baseline (the saved settings) included, runs as its own instance
(``{model}-tune-N``) started fresh through the agent; the registry is never touched. Each step
varies one dimension on top of the best so far; a configuration already measured (same config
hash) is not measured again. Then the top two accepted candidates and the baseline are measured
again from fresh starts, in random order, with more repetitions; a candidate wins only when it
beats that re-measured baseline by ``min_gain`` with a score range clear of the baseline's.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from daemon.api.jobs import CandidateResult, ScorePoint, TuneRequest, TuningResult
from daemon.api.models import ModelDefinition
from daemon.jobs.benchmark import (
    LONG_BUDGET_SHARE,
    LONG_MARGIN_TOKENS,
    SuitePlan,
    measure,
)
from daemon.jobs.instances import (
    CandidateFailed,
    NodeAccess,
    runtime_session,
    tune_instance_id,
)
from daemon.jobs.job import Job
from daemon.jobs.planner import CONFIRM_SLOTS, estimate_eta
from daemon.jobs.presets import Preset
from daemon.jobs.scoring import (
    decide,
    effective_guards,
    guard_failures,
    score,
    score_range,
)
from daemon.jobs.spaces import Config, SearchSpace


class TuningFailed(Exception):
    """The run cannot go on (its baseline did not run); the saved settings are restored."""


class TuningRun:
    def __init__(self, job: Job, request: TuneRequest, definition: ModelDefinition, access: NodeAccess,
                 space: SearchSpace, preset: Preset, dims: list[str], publish: Callable[[], None],
                 watch: Callable[[], None], pace_hint: tuple[float, float]) -> None:
        self.job, self.request, self.definition, self.access = job, request, definition, access
        self.space, self.preset, self.dims = space, preset, dims
        self._publish, self._watch = publish, watch
        self._start_hint, self._bench_hint = pace_hint
        self._rng = random.Random(request.seed)
        self._serial = 0
        self._seen: set[str] = set()
        self._starts: list[float] = []
        self._benches: list[float] = []
        self._fixed: SuitePlan | None = None
        self.guards = list(preset.guards)
        self.result = TuningResult(model=definition.id, node=definition.node, preset=preset.id,
                                   search=request.search, stamp=job.stamp, started_at=job.started_at,
                                   saved_hash=space.fingerprint(space.saved()), dimensions=list(dims))
        space.start_result(self.result)

    def _hash(self, settings: Config) -> str:
        return self.space.fingerprint(settings)

    def _candidate(self, settings: Config, **fields: object) -> CandidateResult:
        cand = CandidateResult.model_validate({**fields, "effective_config": self.space.effective(settings),
                                               "config_hash": self._hash(settings)})
        self.space.put(cand, settings)
        return cand

    # --- the run --------------------------------------------------------------------------------
    async def run(self) -> TuningResult:
        base, _reps = await self._measure(0, "baseline", "The saved settings, measured like every candidate.",
                                          self.space.saved(), self.request.suite.repetitions)
        self._add(base)
        if base.status != "measured":
            raise TuningFailed(f"the saved settings could not be measured: {base.error}")
        base.score = 1.0
        self.guards, notes = effective_guards(self.preset.guards, base.metrics)
        self.result.guards = [g.label for g in self.guards]
        self.result.notes += notes
        self._project(0, self.dims)
        best = base
        for position, dim in enumerate(self.dims):
            best = await self._step(dim, best, self.dims[position + 1:])
        await self._confirm(base)
        return self.result

    async def _step(self, dim: str, best: CandidateResult, later: list[str]) -> CandidateResult:
        goal, tradeoff = self.space.goal(dim)
        accepted: list[CandidateResult] = []
        variants = self.space.variants(dim, self.space.config_of(best), self.request.values.get(dim))
        for position, (label, settings) in enumerate(variants):
            if self._measured() >= self.request.max_candidates:
                note = f"stopped at {self.request.max_candidates} candidates (the limit of this run)"
                if note not in self.result.notes:
                    self.result.notes.append(note)
                break
            description = f"{dim}: {label} — {goal} {tradeoff}"
            if self._hash(settings) in self._seen:
                self._add(self._candidate(settings, index=len(self.result.candidates), step=dim,
                                          description=description, status="duplicate"))
                continue
            cand, _reps = await self._measure(len(self.result.candidates), dim, description, settings,
                                              self.request.suite.repetitions)
            self._judge(cand, self.result.candidates[0].metrics)
            self._add(cand)
            if cand.status == "measured":
                accepted.append(cand)
            self._project(len(variants) - position - 1, later)
        top = max(accepted, key=lambda c: c.score or 0.0, default=None)
        return top if top is not None and (top.score or 0.0) > (best.score or 0.0) else best

    def _judge(self, cand: CandidateResult, reference: dict[str, float]) -> None:
        if cand.status != "measured":
            return
        outcome = score(self.preset.components, cand.metrics, reference)
        cand.score = outcome.value
        cand.guard_failures = guard_failures(self.guards, cand.metrics, reference)
        if outcome.rejected:
            cand.guard_failures.append(outcome.rejected)
        if cand.guard_failures or cand.score is None:
            cand.status = "rejected"

    async def _confirm(self, base: CandidateResult) -> None:
        ranked = sorted((c for c in self.result.candidates[1:] if c.status == "measured" and (c.score or 0) > 1.0),
                        key=lambda c: c.score or 0.0, reverse=True)[:CONFIRM_SLOTS - 1]
        if not ranked:
            self.result.decision = "no change: no candidate beat the saved settings in the search"
            return
        entries = [base, *ranked]
        self._rng.shuffle(entries)
        measured: dict[int, tuple[CandidateResult, list[dict[str, float]]]] = {}
        self.job.candidates_total = self.job.candidates_done + len(entries)
        for position, entry in enumerate(entries):
            self._project_confirmations(len(entries) - position)
            conf, reps = await self._measure(entry.index, "confirmation",
                                             f"confirming #{entry.index}: {entry.effective_config}",
                                             self.space.config_of(entry), self.request.confirm_repetitions)
            self.result.confirmation.append(conf)
            measured[entry.index] = (conf, reps)
            self.job.candidates_done += 1
        self._decide(measured)

    def _decide(self, measured: dict[int, tuple[CandidateResult, list[dict[str, float]]]]) -> None:
        base, base_reps = measured[0]
        if base.status != "measured" or not base_reps:
            self.result.decision = f"no change: the baseline could not be measured again ({base.error})"
            return
        components, reference = self.preset.components, base.metrics
        base.score = 1.0
        base.score_min, base.score_max = score_range(components, base_reps, reference) or (1.0, 1.0)
        contenders: dict[str, tuple[float, tuple[float, float] | None]] = {}
        excluded: list[str] = []
        for index, (conf, reps) in measured.items():
            if index == 0:
                continue
            self._judge(conf, reference)
            bounds = score_range(components, reps, reference)
            conf.score_min, conf.score_max = bounds if bounds else (None, None)
            if conf.status == "measured" and conf.score is not None:
                contenders[f"#{index}"] = (conf.score, bounds)
            else:
                excluded.append(f"#{index} {conf.status}: {conf.error or '; '.join(conf.guard_failures)}")
            self.job.scores.append(ScorePoint(label=f"confirm #{index}", score=conf.score))
        decision = decide((base.score_min, base.score_max), contenders, self.request.min_gain)
        if decision.winner is None:
            reasons = ([decision.reason] if contenders else []) + excluded
            self.result.decision = f"no change: {'; '.join(reasons)}"
            return
        winner = int(decision.winner[1:])
        self.result.winner, self.result.gain = winner, decision.gain
        self.space.set_winner(self.result, self.result.candidates[winner])
        self.result.decision = decision.reason

    # --- one configuration ----------------------------------------------------------------------
    async def _measure(self, index: int, step: str, description: str, settings: Config,
                       repetitions: int) -> tuple[CandidateResult, list[dict[str, float]]]:
        self._serial += 1
        instance_id = tune_instance_id(self.definition.id, self._serial)
        self._seen.add(self._hash(settings))
        cand = self._candidate(settings, index=index, instance_id=instance_id, step=step, description=description)
        self.job.candidate, self.job.phase, self.job.message = description, f"starting {instance_id}", ""
        self._publish()
        d = self.definition
        spec = self.space.spec(instance_id, settings)
        began = time.monotonic()
        try:
            try:
                info = await self.access.launch(spec)
            except CandidateFailed as exc:
                cand.status, cand.error = "failed", str(exc)
                return cand, []
            cand.start_seconds = time.monotonic() - began
            self.job.phase = f"measuring {instance_id}"
            options = self.request.suite.model_copy(update={"repetitions": repetitions})
            measured_at = time.monotonic()
            async with runtime_session() as session:
                target = self.access.target(info, d.served_name, options.request_timeout_s, session)
                outcome, plan, _slots = await measure(target, self.preset, options, fallback_slots=self.space.slots(settings),
                                                      progress=self._on_suite, fixed=self._fixed, rng=self._rng)
            cand.benchmark_seconds = time.monotonic() - measured_at
            self._remember(cand, plan)
            cand.metrics = outcome.metrics
            cand.error = outcome.errors[0] if outcome.errors else None
            self._watch()
            return cand, outcome.repetitions
        finally:
            await self.access.remove(instance_id)

    def _remember(self, cand: CandidateResult, plan: SuitePlan) -> None:
        if cand.step != "confirmation":
            self._starts.append(cand.start_seconds or 0.0)
            self._benches.append(cand.benchmark_seconds or 0.0)
        if self._fixed is None:
            self._fixed = plan
            self.result.levels = list(plan.levels)
            longest = max(plan.long_tokens or 0, plan.longest_tokens or 0)
            if longest:  # later steps must leave every slot room for the baseline's longest prompt
                self.space.need_slot_ctx(int(longest / LONG_BUDGET_SHARE) + LONG_MARGIN_TOKENS)

    def _on_suite(self, text: str, fraction: float) -> None:
        self.job.message = text
        total = max(1, self.job.candidates_total)
        self.job.progress = min(0.99, (self.job.candidates_done + fraction) / total)
        self._publish()

    def _add(self, cand: CandidateResult) -> None:
        self.result.candidates.append(cand)
        if cand.status != "duplicate":
            self.job.candidates_done += 1
            if cand.status in ("measured", "rejected"):
                self.job.scores.append(ScorePoint(label=f"#{cand.index} {cand.effective_config}", score=cand.score))
        self._publish()

    def _measured(self) -> int:
        return sum(1 for c in self.result.candidates[1:] if c.status != "duplicate")

    def _project(self, left_here: int, later: list[str]) -> None:
        """Re-estimate what is left from this run's own pace."""
        saved = self.space.config_of(self.result.candidates[0])
        ahead = left_here + sum(len(self.space.variants(d, saved, self.request.values.get(d))) for d in later)
        self.job.candidates_total = max(self.job.candidates_total, self.job.candidates_done + ahead + CONFIRM_SLOTS)
        self.job.eta_s = self._eta(ahead, CONFIRM_SLOTS)

    def _project_confirmations(self, left: int) -> None:
        self.job.eta_s = self._eta(0, left)
        self._publish()

    def _eta(self, candidates: int, confirmations: int) -> float:
        start = statistics.median(self._starts) if self._starts else self._start_hint
        bench = statistics.median(self._benches) if self._benches else self._bench_hint
        return estimate_eta(candidates, confirmations, start, bench, self.request.suite.repetitions,
                            self.request.confirm_repetitions)
