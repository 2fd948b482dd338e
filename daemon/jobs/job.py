"""One job in progress (``Job``) and the headline figures of a result.

``Job`` is the daemon's mutable record; ``view()`` makes the immutable ``JobView`` the API and the
event bus carry. The model's maintenance window while a job runs is ``daemon.models.maintenance``'s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import ConfigDict, Field

from daemon.api.jobs import (
    BenchmarkResult,
    JobState,
    JobView,
    ScorePoint,
    TuningResult,
)


class Job(JobView):
    """A job in progress: the fields of its view, changed in place as it runs, and what only the daemon
    holds (its stamp, its task, whether a cancel was asked). ``summary`` is made by ``view``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    stamp: str
    state: JobState = JobState.DRAINING
    started_at: float = Field(default_factory=time.time)
    phase: str = "waiting for requests in flight"
    task: asyncio.Task[Any] | None = None
    cancel_requested: bool = False

    def flag(self, reasons: list[str]) -> None:
        for reason in reasons:
            if reason not in self.noisy:
                self.noisy.append(reason)

    def view(self, with_result: bool = False) -> JobView:
        fields = {name: getattr(self, name) for name in JobView.model_fields}
        return JobView(**{**fields, "progress": min(1.0, max(0.0, self.progress)), "scores": list(self.scores),
                          "noisy": list(self.noisy),
                          "summary": summarize(self.result) if self.result is not None else {},
                          "result": self.result if with_result else None})


_BENCH_HEADLINES = ("single_tps", "top_agg_tps", "single_ttft_p50_ms", "top_ttft_p95_ms", "long_ttft_ms",
                    "long_prefill_tps", "cached_ttft_ms", "max_agg_tps", "emb_single_tps", "emb_top_tps",
                    "tool_valid", "objective_score", "error_rate")


def summarize(result: BenchmarkResult | TuningResult) -> dict[str, float]:
    """The few figures a history table shows for a stored result."""
    if isinstance(result, BenchmarkResult):
        out = {k: result.metrics[k] for k in _BENCH_HEADLINES if k in result.metrics}
        if result.overhead is not None:  # what the router adds: router ÷ runtime (or agent)
            ratios = {"overhead_ttft_ratio": result.overhead.ttft_ratio, "overhead_tps_ratio": result.overhead.tps_ratio}
            out.update({k: v for k, v in ratios.items() if v is not None})
        return out
    out: dict[str, float] = {"candidates": float(sum(1 for c in result.candidates if c.status != "duplicate"))}
    if result.gain is not None:
        out["gain"] = result.gain
    out["winner"] = float(result.winner) if result.winner is not None else -1.0
    return out


def view_of_result(result: BenchmarkResult | TuningResult, job_id: str, with_result: bool) -> JobView:
    """A stored result as a finished job."""
    return JobView(id=job_id, kind=result.kind, model=result.model, node=result.node, preset=result.preset,
                   search=result.search if isinstance(result, TuningResult) else None, state=result.state,
                   started_at=result.started_at, finished_at=result.finished_at, progress=1.0,
                   phase=result.state.value, message=getattr(result, "decision", "") or "",
                   noisy=list(result.noisy), error=result.error, summary=summarize(result),
                   scores=_scores(result), result=result if with_result else None)


def _scores(result: BenchmarkResult | TuningResult) -> list[ScorePoint]:
    if isinstance(result, BenchmarkResult):
        return []
    return [ScorePoint(label=f"#{c.index} {c.effective_config}", score=c.score)
            for c in result.candidates if c.status in ("measured", "rejected")]
