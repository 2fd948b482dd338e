"""Jobs in a real daemon with its agent child and the fake runtime: benchmark, maintenance, tuning.

The fake runtime is told which configuration is fast (``FAKE_FAST_WHEN``), by a factor of ten so
the search's choice does not depend on the machine's load; ``FAKE_FAST_ONCE`` makes one start
lucky, which the confirmation stage must see through. One daemon and agent serve the module: each
test sets the fake's switches (the daemon's runtime is one wrapper, rewritten; a start runs what it
says then) and adds its own model (its own id, so its stored jobs are its own; served as ``m``),
which the fixture removes after it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from agent.api.models import InstanceState
from daemon.api.client import DaemonError
from daemon.api.jobs import (
    BenchmarkRequest,
    JobState,
    JobView,
    SuiteOptions,
    TuneRequest,
    TuningResult,
)
from daemon.api.models import ModelState
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]  # the tests share the module's daemon

QUICK_SUITE = SuiteOptions(levels=[1, 2], repetitions=2, max_tokens=6, long_prompt_tokens=60,
                           objective_questions=1, tool_cases=3, drain_timeout_s=30)
TUNE_SUITE = SuiteOptions(levels=[1], repetitions=2, max_tokens=8, long_prompt_tokens=40,
                          objective_questions=0, tool_cases=0, drain_timeout_s=30)


async def wait_job(d: RunningDaemon, job_id: str, done: Callable[[JobView], bool], timeout: float = 120) -> JobView:
    """Wait on the daemon's event feed until the job's view satisfies ``done``."""
    since = 0
    deadline = time.monotonic() + timeout
    while True:
        view = await d.client.get_job(job_id)
        if done(view):
            return view
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"job {job_id} is {view.state.value} ({view.phase}); condition not met")
        since = (await d.client.events(since, timeout=min(left, 5))).last_id


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[RunningDaemon, Path]]:
    root = tmp_path_factory.mktemp("jobs")
    runtime = write_fake_runtime(root / "bin")
    async with running_daemon(root / "home", runtime, telemetry_interval_s=0.2) as d:
        yield d, runtime


@pytest_asyncio.fixture(loop_scope="module")
async def d(shared: tuple[RunningDaemon, Path]) -> AsyncIterator[RunningDaemon]:
    """The module's daemon; a job the test left running is cancelled and its models removed after it."""
    running, _runtime = shared
    yield running
    for view in await running.client.list_jobs():
        if not view.state.finished:
            await running.client.cancel_job(view.id)
    for definition in running.daemon.registry.all():
        await running.client.stop_model(definition.id)
        await running.client.delete_model(definition.id)


@pytest.fixture
def fake_runtime(shared: tuple[RunningDaemon, Path]) -> Callable[..., None]:
    """``fake_runtime(tokens=3, ...)``: the daemon's runtime has these switches from its next start."""
    runtime = shared[1]

    def switches(**given: object) -> None:
        write_fake_runtime(runtime.parent, runtime.name, **given)

    return switches


def finished(view: JobView) -> bool:
    return view.state.finished


async def started_model(d: RunningDaemon, model_id: str, model_file: Path, served_name: str = "m",
                        **settings: object) -> None:
    """The test's model, served as ``m`` unless told."""
    await d.client.create_model(model(model_id, str(model_file), served_name=served_name,
                                      settings={"ctx_size": 4096, "parallel": 2, **settings}))
    status = await d.client.start_model(model_id, wait=True)
    assert status.state == ModelState.READY, status.error


async def tune_instances_running(d: RunningDaemon) -> list[str]:
    """Asked of the agent itself, not of the daemon's cache of it."""
    page = await d.daemon.links["local"].client.instances()
    return [i.instance_id for i in page.instances if "-tune-" in i.instance_id
            and i.state in (InstanceState.STARTING, InstanceState.READY)]


async def test_a_benchmark_measures_the_running_model_and_stores_its_settings(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.01, tokens=1000)
    await started_model(d, "bench", model_file, threads=2)
    job = await d.client.start_benchmark(BenchmarkRequest(model="bench", suite=QUICK_SUITE))
    assert job.kind == "benchmark" and job.state == JobState.DRAINING
    view = await wait_job(d, job.id, finished)
    assert view.state == JobState.SUCCEEDED, view.error
    result = view.result
    status = (await d.client.get_model("bench")).status
    assert result is not None and result.kind == "benchmark"
    assert (result.settings.threads, result.settings.parallel, result.settings.ctx_size) == (2, 2, 4096)
    assert result.config_hash == status.running_config_hash and result.argv
    assert [(lv.concurrency, lv.requests, lv.errors) for lv in result.levels] == [(1, 1, 0), (2, 2, 0)]
    assert len(result.repetitions) == 2 and result.metrics["error_rate"] == 0.0
    assert result.metrics["single_tps"] > 0 and result.prefill is not None and result.prefill.cached_ttft_ms
    assert result.objective is not None and result.objective.total == 1
    # The fake runtime calls the tool it is offered with arguments that fit its schema.
    assert result.tool_calls is not None and (result.tool_calls.total, result.tool_calls.passed) == (3, 3)
    assert result.tool_calls.details == ["get_weather: valid", "get_time: valid", "search_documents: valid"]
    assert (d.daemon.paths.home / "benchmarks" / "bench" / f"{result.stamp}.json").is_file()
    listed = await d.client.list_jobs("bench")
    assert [j.id for j in listed] == [job.id] and listed[0].summary["single_tps"] > 0
    kinds = {e.type for e in (await d.client.events(0, timeout=0)).events if e.model == "bench"}
    assert {"job.started", "job.progress", "job.finished"} <= kinds


async def test_tool_calls_with_arguments_off_their_schema_score_nothing(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(tool_args='{"city": 7, "unit": "kelvin"}')
    suite = QUICK_SUITE.model_copy(update={"levels": [1], "repetitions": 1, "objective_questions": 0,
                                           "tool_cases": 1})
    await started_model(d, "tools", model_file)
    job = await d.client.start_benchmark(BenchmarkRequest(model="tools", suite=suite))
    view = await wait_job(d, job.id, finished)
    assert view.state == JobState.SUCCEEDED, view.error
    checked = view.result.tool_calls if view.result else None
    assert checked is not None and (checked.total, checked.passed) == (1, 0)
    assert checked.details == [("get_weather: arguments.city: expected string, got int; "
                                "arguments.unit: 'kelvin' is not one of ['celsius', 'fahrenheit']")]


async def test_requests_get_maintenance_while_a_job_drains_and_flow_again_after(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.02, tokens=1000)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with aiohttp.ClientSession() as http:
        await started_model(d, "drained", model_file)
        long_body = {**body, "max_tokens": 5000, "stream": True}
        async with http.post(f"{d.v1}/chat/completions", json=long_body) as held:
            await held.content.readline()  # a request in flight: the job must wait for it
            job = await d.client.start_benchmark(BenchmarkRequest(model="drained", suite=QUICK_SUITE))
            async with http.post(f"{d.v1}/chat/completions", json=body) as refused:
                payload = await refused.json()
                assert refused.status == 503 and payload["error"]["code"] == "maintenance"
                assert int(refused.headers["Retry-After"]) >= 1
            assert (await d.client.get_job(job.id)).state == JobState.DRAINING
        view = await wait_job(d, job.id, finished)
        assert view.state == JobState.SUCCEEDED and "noisy: in-flight requests at start" not in view.noisy
        async with http.post(f"{d.v1}/chat/completions", json=body) as served:
            assert served.status == 200


async def test_a_drain_that_times_out_flags_the_run_noisy(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.02, tokens=1000)
    suite = QUICK_SUITE.model_copy(update={"drain_timeout_s": 0.3, "levels": [1], "repetitions": 1})
    async with aiohttp.ClientSession() as http:
        await started_model(d, "noisy", model_file)
        held_body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000,
                     "stream": True}
        async with http.post(f"{d.v1}/chat/completions", json=held_body) as held:
            await held.content.readline()
            job = await d.client.start_benchmark(BenchmarkRequest(model="noisy", suite=suite))
            view = await wait_job(d, job.id, finished)
        assert view.state == JobState.SUCCEEDED
        assert "noisy: in-flight requests at start" in view.noisy
        assert view.result is not None and "noisy: in-flight requests at start" in view.result.noisy


async def test_tuning_finds_the_planted_configuration_past_one_that_fails_to_start(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.03, tokens=1000, fast_when="--threads 1", fail_when="--threads 3")
    await started_model(d, "planted", model_file, threads=2)
    request = TuneRequest(model="planted", dimensions=["threads"], values={"threads": [3, 1]}, suite=TUNE_SUITE,
                          confirm_repetitions=3, seed=7)
    plan = await d.client.plan_tune(request)
    assert [s.values for s in plan.steps] == [["threads=3", "threads=1"]] and plan.candidates == 3
    job = await d.client.start_tune(request)
    view = await wait_job(d, job.id, finished, timeout=240)
    result = view.result
    assert view.state == JobState.SUCCEEDED, view.error
    assert isinstance(result, TuningResult)
    by_threads = {c.settings.threads: c for c in result.candidates}
    assert by_threads[3].status == "failed" and "exit" in (by_threads[3].error or "").lower()
    assert by_threads[1].status == "measured" and by_threads[1].score > 2
    assert result.winner == by_threads[1].index and result.winner_settings.threads == 1
    assert result.gain is not None and result.gain > 2 and len(result.confirmation) == 2
    winner_conf = next(c for c in result.confirmation if c.index == result.winner)
    baseline_conf = next(c for c in result.confirmation if c.index == 0)
    assert winner_conf.score_min > baseline_conf.score_max
    status = (await d.client.get_model("planted")).status
    assert status.state == ModelState.READY and not status.restart_pending  # saved settings back
    assert (await d.client.get_model("planted")).definition.settings.threads == 2  # registry untouched
    assert await tune_instances_running(d) == []
    applied = await d.client.apply_job(job.id, restart=False)
    assert applied.definition.settings.threads == 1 and applied.status.restart_pending


async def test_a_configuration_faster_only_by_luck_loses_in_confirmation(
        d: RunningDaemon, tmp_path: Path, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.03, tokens=1000, fast_when="--threads 1",
                           fast_once=str(tmp_path / "lucky-once"))
    await started_model(d, "lucky", model_file, threads=2)
    request = TuneRequest(model="lucky", dimensions=["threads"], values={"threads": [1]}, suite=TUNE_SUITE,
                          confirm_repetitions=5, seed=3)
    job = await d.client.start_tune(request)
    view = await wait_job(d, job.id, finished, timeout=240)
    result = view.result
    assert isinstance(result, TuningResult) and view.state == JobState.SUCCEEDED, view.error
    assert result.candidates[1].score > 2  # the lucky start fooled the search...
    assert result.winner is None and result.winner_settings is None  # ...not the confirmation
    assert result.decision.startswith("no change")
    with pytest.raises(DaemonError) as refused:
        await d.client.apply_job(job.id)
    assert refused.value.code == "no_winner"


async def test_cancel_stops_the_candidate_and_restores_the_saved_settings(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.05, tokens=1000)
    suite = TUNE_SUITE.model_copy(update={"repetitions": 10, "max_tokens": 40})
    await started_model(d, "cancelled", model_file, threads=2)
    job = await d.client.start_tune(TuneRequest(model="cancelled", dimensions=["threads"], values={"threads": [1]},
                                                suite=suite))
    await wait_job(d, job.id, lambda v: v.phase.startswith("measuring"))
    assert await tune_instances_running(d) and (await d.client.get_model("cancelled")).status.state == ModelState.STOPPED
    with pytest.raises(DaemonError) as conflict:
        await d.client.start_benchmark(BenchmarkRequest(model="cancelled"))
    assert conflict.value.status == 409 and conflict.value.code == "job_conflict"
    # Every view says it is being tuned, and a Start is refused with why (the job brings it back).
    status = (await d.client.get_model("cancelled")).status
    assert status.busy == f"tuning (job {job.id})"
    with pytest.raises(DaemonError) as busy:
        await d.client.start_model("cancelled")
    assert (busy.value.status, busy.value.code) == (409, "model_busy") and "being tuned" in busy.value.message
    assert (await d.client.get_model("cancelled")).status.state == ModelState.STOPPED
    assert ctl._fmt_model(status).split()[1] == "tuning"
    view = await d.client.cancel_job(job.id)
    assert view.state == JobState.CANCELLED
    status = (await d.client.get_model("cancelled")).status
    assert status.state == ModelState.READY and not status.restart_pending
    assert await tune_instances_running(d) == [] and len(d.daemon.maintenance) == 0
    stored = (await d.client.get_job(job.id)).result
    assert stored is not None and stored.state == JobState.CANCELLED


async def test_after_a_crash_mid_tuning_the_next_boot_stops_leftovers_and_brings_the_model_back(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.01, tokens=8)
    await started_model(d, "crashed", model_file)
    link = d.daemon.links["local"]
    definition = d.daemon.registry.require("crashed")
    await d.client.stop_model("crashed")  # as the run left it: model stopped, a candidate running
    leftover = d.daemon.orchestrator.launch_spec(definition).model_copy(update={"instance_id": "crashed-tune-4"})
    await link.client.start(leftover)
    await link.refresh()
    d.daemon.jobs.store.mark_active({"model": "crashed", "node": "local", "was_running": True, "job": "tune.crashed.x"})
    await d.daemon.jobs.recover()
    assert await tune_instances_running(d) == []
    assert (await d.client.get_model("crashed")).status.state == ModelState.READY
    assert d.daemon.jobs.store.read_active() is None
