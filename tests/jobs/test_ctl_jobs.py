"""``mirbadllm ctl bench`` / ``tune``: the progress bar, the printed tables, and a run end to end."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.api.llamacpp import LlamaCppSettings
from daemon.api.jobs import (
    BenchmarkResult,
    CandidateResult,
    JobState,
    JobView,
    LevelResult,
    PrefillResult,
    TuningResult,
)
from mirbadllm import ctl
from mirbadllm.ctl_jobs import format_benchmark, format_tuning, progress_line
from tests.daemon.harness import model, running_daemon


def test_the_progress_bar_shows_progress_candidates_phase_and_eta() -> None:
    view = JobView(id="tune.m.1", kind="tune", model="m", state=JobState.RUNNING, started_at=0, progress=0.5,
                   phase="measuring m-tune-3", message="repetition 2: 16 at once", candidates_done=3,
                   candidates_total=8, eta_s=190)
    assert progress_line(view, width=10) == ("[#####.....]  50 %  3/8  measuring m-tune-3  repetition 2: 16 at once"
                                             "  · ETA 3 min 10 s")


def test_a_benchmark_prints_one_row_per_level_and_the_long_prompt() -> None:
    result = BenchmarkResult(model="m", stamp="20260101T000000Z", started_at=0, config_hash="abc",
                             levels=[LevelResult(concurrency=1, requests=1, per_request_tps=41.25,
                                                 aggregate_tps=40.0, ttft_p50_ms=120.0, ttft_p95_ms=130.0)],
                             prefill=PrefillResult(prompt_tokens=2000, ttft_ms=900.0, prefill_tps=2222.0,
                                                   cached_ttft_ms=80.0),
                             noisy=["noisy: CPU 40 % busy with work outside MirbadLLM"])
    lines = format_benchmark(result)
    assert lines[2] == "  1                41.2              40.0           120           130        0"
    assert lines[3] == "long prompt: 2000 tokens, TTFT 900 ms (2222 tok/s), again (cached) 80 ms"
    assert lines[-1] == "! noisy: CPU 40 % busy with work outside MirbadLLM"


def test_a_tuning_run_prints_candidates_confirmation_ranges_and_the_decision() -> None:
    saved, fast = LlamaCppSettings(threads=2), LlamaCppSettings(threads=1)
    result = TuningResult(
        model="m", stamp="s", started_at=0, winner=1, gain=1.5, decision="#1 beats the baseline by 50.0 %",
        candidates=[CandidateResult(index=0, step="baseline", settings=saved, score=1.0, effective_config="threads=2"),
                    CandidateResult(index=1, step="threads", settings=fast, score=1.6, effective_config="threads=1"),
                    CandidateResult(index=2, step="threads", settings=fast, status="failed", error="exited 1",
                                    effective_config="threads=3")],
        confirmation=[CandidateResult(index=1, step="confirmation", settings=fast, score=1.5, score_min=1.45,
                                      score_max=1.55, effective_config="threads=1")])
    lines = format_tuning(result)
    assert lines[4] == "   2  threads            —    failed      threads=3  (exited 1)"
    assert lines[6] == "  #1   score 1.500  range 1.450–1.550  threads=1"
    assert lines[7] == "decision: #1 beats the baseline by 50.0 % (tuned ÷ saved = 1.500)"


@pytest.mark.slow
async def test_ctl_bench_runs_a_benchmark_and_prints_its_table(
        tmp_path: Path, model_file: Path, fake_runtime: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    # The default suite asks eight objective questions of 24 tokens each: a fast fake keeps them short.
    async with running_daemon(tmp_path / "home", fake_runtime(token_delay_s=0.001, tokens=1000)) as d:
        await d.client.create_model(model("m", str(model_file), settings={"parallel": 2}))
        await d.client.start_model("m", wait=True)
        args = ctl.parse_args(["bench", "m", "--levels", "1,2", "--repetitions", "1", "--max-tokens", "4",
                               "--long-prompt", "0"])
        started = time.monotonic()
        assert await ctl.run(args, d.client) == 0
        captured = capsys.readouterr()
        out = captured.out
        assert "benchmark.m." in out and "100 %" in captured.err and time.monotonic() - started < 120
        assert "  N   tok/s per request" in out and "\n  2 " in out
