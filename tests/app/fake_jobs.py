"""``FakeJobsClient``: the fake daemon (the demo daemon's jobs API) with jobs the test moves along by hand.

A new job starts draining and stays so; ``advance(job_id, ...)`` publishes a ``job.progress`` event
and ``finish(job_id, result)`` a ``job.finished`` one, as the daemon's ``JobManager`` does. Listing,
reading, cancelling and applying are the demo daemon's; every call is recorded in ``calls``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fake_daemon import FakeDaemonClient

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.jobs import (
    BenchmarkResult,
    CandidateResult,
    JobState,
    JobView,
    PlanStep,
    TuneRequest,
    TuningPlan,
    TuningResult,
)

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
    """The demo daemon's jobs, but each new one waits (draining) for the test to move it along."""

    @property
    def jobs(self) -> dict[str, JobView]:
        """The daemon's jobs by id (the demo's own book); a test may set it to start from its runs."""
        return self._job_book

    @jobs.setter
    def jobs(self, views: dict[str, JobView]) -> None:
        self.__dict__["_demo_jobs"] = dict(views)

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

    async def plan_tune(self, request: TuneRequest) -> TuningPlan:
        self._record("plan_tune", request)
        steps = [PlanStep(dimension="threads", values=["threads=1", "threads=2"], goal="Match the cores.",
                          tradeoff="Too many contend.")]
        return TuningPlan(model=request.model, preset=request.preset, search=request.search, steps=steps,
                          candidates=3, confirmations=3, start_s=5, benchmark_s=40, eta_s=270,
                          notes=["the model is stopped during the run"])
