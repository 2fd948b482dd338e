"""A short real benchmark: the Gemma 3 270M GGUF on the real llama-server, through the daemon's job."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from daemon.api.jobs import BenchmarkRequest, JobState, SuiteOptions
from daemon.api.models import ModelState
from tests.daemon.harness import RunningDaemon, model, running_daemon

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MAX_TOKENS = 6


async def _finished(d: RunningDaemon, job_id: str, timeout: float = 400) -> object:
    since, deadline = 0, time.monotonic() + timeout
    while True:
        view = await d.client.get_job(job_id)
        if view.state.finished:
            return view
        assert time.monotonic() < deadline, f"benchmark still {view.state.value}: {view.phase} {view.message}"
        since = (await d.client.events(since, timeout=5)).last_id


async def test_a_short_benchmark_of_gemma_on_llama_server(tmp_path: Path, gemma_gguf: Path,
                                                         real_llama_server: Path) -> None:
    async with running_daemon(tmp_path / "home", None) as d:
        # One thread: the suite's other worker holds a core, and two threads of llama-server on the one
        # left wait on each other at every step (a token took 200 ms instead of 20).
        settings = {"ctx_size": 2048, "parallel": 2, "threads": 1}
        await d.client.create_model(model("gemma", str(gemma_gguf), settings=settings))
        status = await d.client.start_model("gemma", wait=True)
        assert status.state == ModelState.READY, status.error
        suite = SuiteOptions(levels=[1, 2], repetitions=1, max_tokens=MAX_TOKENS, long_prompt_tokens=96,
                             objective_questions=1, tool_cases=1, drain_timeout_s=10)
        job = await d.client.start_benchmark(BenchmarkRequest(model="gemma", suite=suite))
        view = await _finished(d, job.id)
        assert view.state == JobState.SUCCEEDED, view.error
        result = view.result
        rep = result.repetitions[0]
        # ignore_eos: every request generated exactly the tokens asked for, counted from `usage`
        assert (rep["n1_tokens"], rep["n2_tokens"]) == (MAX_TOKENS, 2 * MAX_TOKENS)
        assert [(lv.concurrency, lv.errors) for lv in result.levels] == [(1, 0), (2, 0)]
        assert result.metrics["single_tps"] > 0 and result.metrics["top_agg_tps"] > 0
        assert result.prefill is not None and result.prefill.prompt_tokens > 50
        assert (result.settings.ctx_size, result.settings.parallel) == (2048, 2)
        assert result.config_hash == (await d.client.get_model("gemma")).status.running_config_hash
        assert result.slots == 2 and result.objective is not None and result.objective.total == 1
        # A base model may not call the tool right, but the check runs against the real parser and is scored.
        assert result.tool_calls is not None and result.tool_calls.total == 1
        assert result.tool_calls.details[0].startswith("get_weather: "), result.tool_calls.details
