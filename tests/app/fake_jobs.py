"""``FakeJobsClient``: the fake daemon plus the jobs API, with jobs the test moves along by hand.

``advance(job_id, ...)`` publishes a ``job.progress`` event and ``finish(job_id, result)`` a
``job.finished`` one, as the daemon's ``JobManager`` does; every call is recorded in ``calls``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fake_daemon import FakeDaemonClient

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.client import DaemonError
from daemon.api.jobs import (
    BenchmarkRequest,
    BenchmarkResult,
    CandidateResult,
    JobState,
    JobView,
    PlanStep,
    TuneRequest,
    TuningPlan,
    TuningResult,
)
from daemon.api.models import ModelView

_LOGGER = logging.getLogger(__name__)


def benchmark_view(model: str, stamp: str, started_at: float, **summary: float) -> JobView:
    return JobView(id=f"benchmark.{model}.{stamp}", kind="benchmark", model=model, state=JobState.SUCCEEDED,
                   started_at=started_at, finished_at=started_at + 30, progress=1.0, summary=summary)


def tuning_result(model: str, stamp: str, *, winner: bool) -> TuningResult:
    base_metrics = {"single_tps": 40.0, "top_agg_tps": 100.0, "long_ttft_ms": 500.0}
    best_metrics = {"single_tps": 60.0, "top_agg_tps": 110.0, "long_ttft_ms": 400.0}
    saved = LlamaCppSettings(threads=4)
    best = LlamaCppSettings(threads=2)
    candidates = [CandidateResult(index=0, step="baseline", settings=saved, score=1.0, metrics=base_metrics),
                  CandidateResult(index=1, step="threads", settings=best, score=1.3, metrics=best_metrics,
                                  effective_config="threads=2")]
    confirmation = [CandidateResult(index=0, step="confirmation", settings=saved, score=1.0, score_min=0.98,
                                    score_max=1.02, metrics=base_metrics),
                    CandidateResult(index=1, step="confirmation", settings=best, score=1.28, score_min=1.25,
                                    score_max=1.31, metrics=best_metrics)]
    return TuningResult(model=model, stamp=stamp, started_at=time.time(), saved_settings=saved,
                        candidates=candidates, confirmation=confirmation if winner else [],
                        winner=1 if winner else None, winner_settings=best if winner else None,
                        gain=1.28 if winner else None,
                        decision="#1 beats the baseline by 28.0 %" if winner else "no change: nothing beat it")


class FakeJobsClient(FakeDaemonClient):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.jobs: dict[str, JobView] = {}

    def advance(self, job_id: str, **changes: Any) -> JobView:
        view = self.jobs[job_id].model_copy(update=changes)
        self.jobs[job_id] = view
        self.publish("job.progress", view.model, job=view.model_dump(mode="json"))
        return view

    def finish(self, job_id: str, result: BenchmarkResult | TuningResult | None = None,
               **summary: float) -> JobView:
        view = self.jobs[job_id].model_copy(update={"state": JobState.SUCCEEDED, "progress": 1.0,
                                                    "result": result, "summary": summary,
                                                    "finished_at": time.time()})
        self.jobs[job_id] = view
        self.publish("job.finished", view.model, job=view.model_copy(update={"result": None}).model_dump(mode="json"))
        return view

    def _new(self, kind: str, model: str, **extra: Any) -> JobView:
        view = JobView(id=f"{kind}.{model}.{len(self.jobs) + 1:04d}", kind=kind, model=model,  # type: ignore[arg-type]
                       state=JobState.DRAINING, started_at=time.time(), **extra)
        self.jobs[view.id] = view
        self.publish("job.started", model, job=view.model_dump(mode="json"))
        return view

    async def start_benchmark(self, request: BenchmarkRequest) -> JobView:
        self._record("start_benchmark", request)
        return self._new("benchmark", request.model, preset=request.preset)

    async def start_tune(self, request: TuneRequest) -> JobView:
        self._record("start_tune", request)
        return self._new("tune", request.model, preset=request.preset, search=request.search)

    async def plan_tune(self, request: TuneRequest) -> TuningPlan:
        self._record("plan_tune", request)
        steps = [PlanStep(dimension="threads", values=["threads=1", "threads=2"], goal="Match the cores.",
                          tradeoff="Too many contend.")]
        return TuningPlan(model=request.model, preset=request.preset, search=request.search, steps=steps,
                          candidates=3, confirmations=3, start_s=5, benchmark_s=40, eta_s=270,
                          notes=["the model is stopped during the run"])

    async def list_jobs(self, model: str | None = None, kind: str | None = None) -> list[JobView]:
        self._record("list_jobs", model, kind)
        views = [v.model_copy(update={"result": None}) for v in self.jobs.values()
                 if (model is None or v.model == model) and (kind is None or v.kind == kind)]
        return sorted(views, key=lambda v: v.started_at, reverse=True)

    async def get_job(self, job_id: str) -> JobView:
        self._record("get_job", job_id)
        if job_id not in self.jobs:
            raise DaemonError(404, "job_not_found", f"no job '{job_id}'")
        return self.jobs[job_id]

    async def cancel_job(self, job_id: str) -> JobView:
        self._record("cancel_job", job_id)
        view = self.jobs[job_id].model_copy(update={"state": JobState.CANCELLED})
        self.jobs[job_id] = view
        self.publish("job.finished", view.model, job=view.model_dump(mode="json"))
        return view

    async def apply_job(self, job_id: str, restart: bool = False) -> ModelView:
        self._record("apply_job", job_id, restart)
        result = self.jobs[job_id].result
        if not isinstance(result, TuningResult) or result.winner_settings is None:
            raise DaemonError(409, "no_winner", "this run has no winner to apply")
        view = self._view(result.model)
        self.definitions[result.model] = view.definition.model_copy(update={"settings": result.winner_settings})
        self.publish("model.updated", result.model)
        return self._view(result.model)
