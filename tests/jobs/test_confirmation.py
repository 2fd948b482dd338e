"""The confirmation stage's decision, from re-measured repetitions, with exact figures."""

from __future__ import annotations

from typing import Any

import pytest

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.jobs import CandidateResult, TuneRequest
from daemon.api.models import ModelDefinition
from daemon.jobs.job import Job
from daemon.jobs.planner import Machine
from daemon.jobs.presets import preset
from daemon.jobs.scoring import median_metrics
from daemon.jobs.spaces import SearchSpace
from daemon.jobs.tuning import TuningRun

SAVED, FAST = LlamaCppSettings(threads=4), LlamaCppSettings(threads=2)


def run() -> TuningRun:
    definition = ModelDefinition(id="m", served_name="m", model_path="/m.gguf", settings=SAVED)
    job = Job(id="tune.m.s", kind="tune", model="m", node="local", preset="interactive", stamp="s")
    tuning = TuningRun(job, TuneRequest(model="m"), definition, access=None,  # type: ignore[arg-type]
                       space=SearchSpace(definition, Machine(2, False)), preset=preset("interactive"), dims=[], publish=lambda: None,
                       watch=lambda: None, pace_hint=(1.0, 1.0))
    tuning.result.candidates = [CandidateResult(index=0, step="baseline", settings=SAVED),
                                CandidateResult(index=1, step="threads", settings=FAST)]
    return tuning


def reps(single: list[float], **fixed: float) -> list[dict[str, float]]:
    return [{"single_tps": s, "top_agg_tps": 100.0, "long_ttft_ms": 500.0, "single_ttft_p95_ms": 200.0,
             "top_ttft_p95_ms": 900.0, "error_rate": 0.0, **fixed} for s in single]


def measured(index: int, repetitions: list[dict[str, float]], settings: LlamaCppSettings) -> tuple[Any, Any]:
    return CandidateResult(index=index, step="confirmation", settings=settings,
                           metrics=median_metrics(repetitions)), repetitions


def test_a_candidate_clear_of_the_baseline_wins_with_its_confirmed_gain() -> None:
    tuning = run()
    tuning._decide({0: measured(0, reps([10.0, 10.2, 9.8]), SAVED), 1: measured(1, reps([14.0, 14.5, 13.5]), FAST)})
    r = tuning.result
    assert r.winner == 1 and r.winner_settings == FAST
    assert r.gain == pytest.approx(1.4 ** 0.5)  # single_tps ×1.4 with weight 0.5 of the 1.0
    assert r.decision == "#1 beats the baseline by 18.3 %"


def test_a_candidate_that_breaks_a_guard_in_confirmation_does_not_win_and_says_why() -> None:
    tuning = run()
    slow_first_token = reps([14.0, 14.5, 13.5], top_ttft_p95_ms=3500.0)
    tuning._decide({0: measured(0, reps([10.0, 10.2, 9.8]), SAVED), 1: measured(1, slow_first_token, FAST)})
    r = tuning.result
    assert r.winner is None and r.winner_settings is None
    assert r.decision == ("no change: #1 rejected: short-prompt TTFT p95 at the top level ≤ 3 s: 3500 "
                          "(limit 3000)")


def test_overlapping_ranges_keep_the_saved_settings() -> None:
    tuning = run()
    tuning._decide({0: measured(0, reps([10.0, 12.0, 8.0]), SAVED), 1: measured(1, reps([12.5, 13.0, 9.0]), FAST)})
    assert tuning.result.winner is None and tuning.result.decision.startswith("no change: #1")
