"""The product measures its own overhead: the same chat straight to the runtime and through the
router, interleaved, inside a benchmark job (the router lets the job's own requests through its
maintenance window with the window's token, and nothing else). The tests share one daemon (keys
required), each with its own model and fake runtime switches (the wrapper is rewritten before the
model starts)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from daemon.api.jobs import BenchmarkRequest, JobState, SuiteOptions
from mirbadllm import ctl
from mirbadllm.ctl_jobs import format_benchmark
from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fakes import write_fake_runtime
from tests.jobs.test_jobs_daemon import finished, started_model, wait_job

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]  # the tests share the module's daemon

SUITE = SuiteOptions(levels=[1], repetitions=1, max_tokens=8, long_prompt_tokens=0, objective_questions=0,
                     tool_cases=0, drain_timeout_s=30, overhead_rounds=3)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[RunningDaemon, Path]]:
    root = tmp_path_factory.mktemp("overhead")
    runtime = write_fake_runtime(root / "bin")
    async with running_daemon(root / "home", runtime, require_api_keys=True) as d:
        yield d, runtime


@pytest_asyncio.fixture(loop_scope="module")
async def d(shared: tuple[RunningDaemon, Path]) -> AsyncIterator[RunningDaemon]:
    """The module's daemon; the test's models are removed after it."""
    running, _runtime = shared
    yield running
    for definition in running.daemon.registry.all():
        await running.client.stop_model(definition.id)
        await running.client.delete_model(definition.id)


@pytest.fixture
def fake_runtime(shared: tuple[RunningDaemon, Path]) -> Callable[..., None]:
    """``fake_runtime(token_delay_s=...)``: the daemon's runtime has these switches from its next start."""
    runtime = shared[1]

    def switches(**given: object) -> None:
        write_fake_runtime(runtime.parent, runtime.name, **given)

    return switches


async def test_a_benchmark_measures_the_routers_overhead_with_keys_required(
        d: RunningDaemon, model_file: Path, fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.005, tokens=1000)
    await started_model(d, "routed", model_file, served_name="routed")
    job = await d.client.start_benchmark(BenchmarkRequest(model="routed", suite=SUITE))
    view = await wait_job(d, job.id, finished)
    assert view.state == JobState.SUCCEEDED, view.error
    overhead = view.result.overhead  # type: ignore[union-attr]
    assert overhead is not None and overhead.baseline == "runtime" and overhead.rounds == 3
    paths = {p.path: p for p in overhead.paths}
    assert set(paths) == {"runtime", "router"}
    assert all(p.requests == 3 and p.errors == 0 and p.ttft_p50_ms and p.tokens_per_s_p50 for p in paths.values())
    assert overhead.ttft_ratio and overhead.tps_ratio  # figures, not asserted: bench/ holds the targets
    rows = [r for r in await d.client.requests(limit=100) if r.model == "routed"]
    assert sum(1 for r in rows if r.status == 200) == 3 and all(r.key_id is None for r in rows)
    listed = await d.client.list_jobs("routed")  # saved with the model's benchmarks: its history shows the ratios
    assert listed[0].summary["overhead_ttft_ratio"] == overhead.ttft_ratio
    text = "\n".join(format_benchmark(view.result))  # type: ignore[arg-type]
    assert "router ÷ runtime: TTFT" in text and "3 rounds" in text


async def test_only_the_jobs_own_token_passes_its_window(d: RunningDaemon, model_file: Path,
                                                         fake_runtime: Callable[..., None]) -> None:
    fake_runtime(token_delay_s=0.02, tokens=1000)
    await started_model(d, "m", model_file)
    job = await d.client.start_benchmark(BenchmarkRequest(model="m", suite=SUITE.model_copy(
        update={"repetitions": 3, "levels": [1, 2]})))
    await wait_job(d, job.id, lambda v: v.state == JobState.RUNNING)
    window = d.daemon.maintenance.get("m")
    assert window is not None
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{d.v1}/chat/completions", json=body,
                             headers={"X-MirbadLLM-Job": "not-the-token"}) as r:
            assert r.status == 401  # a wrong token is no key
        key = (await d.client.create_key("user")).key
        async with http.post(f"{d.v1}/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as r:
            assert r.status == 503 and (await r.json())["error"]["code"] == "maintenance"  # users wait
        async with http.post(f"{d.v1}/chat/completions", json=body,
                             headers={"X-MirbadLLM-Job": window.pass_token}) as r:
            assert r.status == 200  # the job's own request
    await wait_job(d, job.id, finished)


async def test_ctl_bench_overhead_asks_for_rounds(tmp_path: Path) -> None:
    args = ctl.parse_args(["bench", "m", "--overhead"])
    assert args.overhead == 10
    assert ctl.parse_args(["bench", "m", "--overhead", "4"]).overhead == 4
    assert ctl.parse_args(["bench", "m"]).overhead is None
