"""The Benchmarks tab's and the tuning wizard's view-models, Qt-free, over the real daemon: its local
agent runs alpha on the fake llama-server and benchmarks it for real; its stored runs are the history;
a tuning run holds where it measures (``real_daemon.held_tuning``) and the test moves it along."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from helpers import started, until
from real_daemon import (
    HeldTuning,
    RealDaemon,
    benchmark_result,
    benchmarks_client,
    benchmarks_daemon,
    held_tuning,
    stored_runs,
    tuning_result,
)

from app.viewmodels.benchmarks import BenchmarksViewModel, compare
from app.viewmodels.observable import Emitter
from app.viewmodels.tuning import Step, TuningWizardViewModel, WizardState
from daemon.api.client import DaemonClient
from daemon.api.jobs import (
    JobState,
    JobView,
    ScorePoint,
)
from daemon.api.models import Event


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    with benchmarks_daemon(tmp_path_factory.mktemp("benchmarks")) as found:
        yield found


@pytest.fixture
async def daemon(served: RealDaemon) -> AsyncIterator[DaemonClient]:
    client = await benchmarks_client(served)
    yield client
    await client.close()


@pytest.fixture
def history(served: RealDaemon) -> None:
    stored_runs(served, benchmark_result("alpha", "0001", 1000.0, single_tps=40.0, top_agg_tps=100.0, single_ttft_p50_ms=200.0),
          benchmark_result("alpha", "0002", 2000.0, single_tps=50.0, top_agg_tps=90.0, single_ttft_p50_ms=100.0),
          benchmark_result("beta", "0003", 3000.0, single_tps=1.0))


@pytest.fixture
def tuning(served: RealDaemon) -> Iterator[HeldTuning]:
    with held_tuning(served) as held:
        yield held


def test_comparison_rows_say_which_way_is_better() -> None:
    rows = compare({"single_tps": 40.0, "single_ttft_p50_ms": 200.0, "objective_score": 0.5},
                   {"single_tps": 50.0, "single_ttft_p50_ms": 250.0, "objective_score": 0.5})
    assert [(r.label, r.a, r.b, r.change, r.better) for r in rows] == [
        ("Tokens/s, one request", 40.0, 50.0, 1.25, True),
        ("First token, one request", 200.0, 250.0, 0.8, False),
        ("Objective answers right", 50.0, 50.0, 1.0, None)]


async def test_history_chart_and_the_previous_run_compared_with_the_latest(
        daemon: DaemonClient, history: None) -> None:
    fleet = await started(daemon)
    vm = BenchmarksViewModel(daemon, fleet.events)
    vm.show("alpha")
    await until(lambda: vm.state.value.runs, timeout=10)
    s = vm.state.value
    assert [r.id for r in s.runs] == ["benchmark.alpha.0002", "benchmark.alpha.0001"]  # beta's is not alpha's
    assert s.chart("single_tps") == ((1000.0, 2000.0), (40.0, 50.0))
    assert s.compare_ids == ("benchmark.alpha.0001", "benchmark.alpha.0002")
    assert [(r.label, r.change) for r in s.rows][:2] == [("Tokens/s, one request", 1.25),
                                                         ("Tokens/s, all requests together", 0.9)]
    vm.select_compare("benchmark.alpha.0002", "benchmark.alpha.0001")
    assert vm.state.value.rows[0].change == 0.8
    vm.close()
    await fleet.stop()


async def test_a_run_is_followed_through_events_and_the_history_reloads_when_it_ends(
        daemon: DaemonClient, history: None) -> None:
    fleet = await started(daemon)
    vm = BenchmarksViewModel(daemon, fleet.events)
    vm.show("alpha")
    await until(lambda: vm.state.value.runs, timeout=10)
    seen: list[JobView] = []
    vm.state.subscribe(lambda s: seen.append(s.active) if s.active is not None else None)
    finished: list[JobView] = []
    vm.finished.subscribe(finished.append)
    view = await vm.run_benchmark("throughput")
    assert view is not None and view.preset == "throughput" and view.model == "alpha"  # the daemon's own job
    await until(lambda: vm.state.value.active is None and len(vm.state.value.runs) == 3, timeout=120,
                what="the run to end and the history to reload")
    progress = [v for v in seen if v.id == view.id and 0 < v.progress < 1]
    assert progress and any(v.message.startswith("repetition 1: ") for v in progress)  # followed as it went
    latest = vm.state.value.runs[0]
    assert latest.id == view.id and latest.state == JobState.SUCCEEDED and latest.summary["single_tps"] > 0
    assert finished[0].id == view.id
    vm.close()
    await fleet.stop()


async def test_the_wizard_walks_preset_search_plan_progress_results_and_applies(
        daemon: DaemonClient, tuning: HeldTuning) -> None:
    fleet = await started(daemon)
    vm = TuningWizardViewModel(daemon, fleet.events, "alpha")
    vm.choose_preset("agents")
    vm.go(Step.SEARCH)
    vm.choose_search("full")
    await vm.make_plan()
    s = vm.state.value
    assert s.step == Step.PLAN and s.plan is not None and s.plan.preset == "agents" and s.plan.search == "full"
    assert {"batch", "cache_type"} <= {st.dimension for st in s.plan.steps} and s.plan.eta_s > 0  # what full adds
    await vm.start()
    job_id = vm.state.value.job.id  # type: ignore[union-attr]
    assert vm.state.value.step == Step.PROGRESS
    assert (await daemon.get_model("alpha")).status.busy == f"tuning (job {job_id})"  # the daemon's own job
    tuning.advance(job_id, progress=0.4, candidate="threads: threads=2 — Match the cores.", eta_s=120.0,
                   scores=[ScorePoint(label="#0", score=1.0), ScorePoint(label="#1", score=1.3)])
    await until(lambda: vm.state.value.job.progress == 0.4, timeout=10)  # type: ignore[union-attr]
    assert vm.state.value.job.candidate.startswith("threads") and len(vm.state.value.job.scores) == 2  # type: ignore[union-attr]
    tuning.finish(job_id, tuning_result("alpha", "-", winner=True))
    await until(lambda: vm.state.value.step == Step.RESULTS, timeout=10)
    s = vm.state.value
    assert s.headline == "Found settings 28 % better than the saved ones."
    assert [(r.label, r.a, r.b) for r in s.rows()][:2] == [("Tokens/s, one request", 40.0, 60.0),
                                                           ("Tokens/s, all requests together", 100.0, 110.0)]
    await vm.apply(restart=True)
    assert vm.state.value.applied and vm.state.value.error is None
    assert (await daemon.get_model("alpha")).definition.settings.threads == 2  # saved in the daemon
    vm.close()
    await fleet.stop()


def test_the_eta_counts_down_between_the_daemons_estimates(daemon: DaemonClient) -> None:
    """Pure view-model: job events as the daemon publishes them, a hand-driven clock."""
    events: Emitter[Event] = Emitter()
    now = [1000.0]
    vm = TuningWizardViewModel(daemon, events, "alpha", clock=lambda: now[0])
    job = JobView(id="tune.alpha.1", kind="tune", model="alpha", state=JobState.RUNNING, started_at=now[0])
    vm.state.set(WizardState(model_id="alpha", step=Step.PROGRESS, job=job))

    def progress(**changes: Any) -> None:
        view = vm.state.value.job.model_copy(update=changes)  # type: ignore[union-attr]
        events.emit(Event(id=1, ts=now[0], type="job.progress", model="alpha", data={"job": view.model_dump(mode="json")}))

    progress(progress=0.4, eta_s=120.0)
    assert vm.eta_text() == " · about 2 min 0 s left"
    now[0] += 45  # the daemon re-estimates only between candidates: the ETA still counts down
    assert vm.eta_text() == " · about 1 min 15 s left"
    progress(progress=0.5)  # news without a new estimate does not reset the countdown
    assert vm.eta_text() == " · about 1 min 15 s left"
    now[0] += 500
    assert vm.eta_text() == " · almost done"
    progress(eta_s=90.0)
    assert vm.eta_text() == " · about 1 min 30 s left"
    vm.close()


async def test_a_run_without_a_winner_says_no_change_and_cancel_shows_the_end(
        daemon: DaemonClient, tuning: HeldTuning) -> None:
    fleet = await started(daemon)
    vm = TuningWizardViewModel(daemon, fleet.events, "alpha")
    await vm.start()
    job_id = vm.state.value.job.id  # type: ignore[union-attr]
    tuning.finish(job_id, tuning_result("alpha", "-", winner=False))
    await until(lambda: vm.state.value.step == Step.RESULTS, timeout=10)
    assert vm.state.value.headline == "No change: the saved settings are already the best found."
    other = TuningWizardViewModel(daemon, fleet.events, "alpha")
    await other.start()
    tuning.advance(other.state.value.job.id, phase="measuring alpha-tune-1")  # type: ignore[union-attr]
    await other.cancel()  # while it measures
    assert other.state.value.step == Step.RESULTS and other.state.value.job.state.value == "cancelled"  # type: ignore[union-attr]
    assert (await daemon.get_job(other.state.value.job.id)).state == JobState.CANCELLED  # type: ignore[union-attr]
    vm.close()
    other.close()
    await fleet.stop()
