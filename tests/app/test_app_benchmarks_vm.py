"""The Benchmarks tab's and the tuning wizard's view-models, Qt-free, over the fake daemon."""

from __future__ import annotations

import pytest
from fake_daemon import definition
from fake_jobs import FakeJobsClient, benchmark_view, tuning_result
from helpers import started, stopped, until

from app.viewmodels.benchmarks import BenchmarksViewModel, compare
from app.viewmodels.tuning import Step, TuningWizardViewModel
from daemon.api.jobs import ScorePoint


@pytest.fixture
def fake() -> FakeJobsClient:
    client = FakeJobsClient([definition("alpha")])
    client.jobs = {v.id: v for v in (
        benchmark_view("alpha", "0001", 1000.0, single_tps=40.0, top_agg_tps=100.0, single_ttft_p50_ms=200.0),
        benchmark_view("alpha", "0002", 2000.0, single_tps=50.0, top_agg_tps=90.0, single_ttft_p50_ms=100.0),
        benchmark_view("beta", "0003", 3000.0, single_tps=1.0))}
    return client


def test_comparison_rows_say_which_way_is_better() -> None:
    rows = compare({"single_tps": 40.0, "single_ttft_p50_ms": 200.0, "objective_score": 0.5},
                   {"single_tps": 50.0, "single_ttft_p50_ms": 250.0, "objective_score": 0.5})
    assert [(r.label, r.a, r.b, r.change, r.better) for r in rows] == [
        ("Tokens/s, one request", 40.0, 50.0, 1.25, True),
        ("First token, one request", 200.0, 250.0, 0.8, False),
        ("Objective answers right", 50.0, 50.0, 1.0, None)]


async def test_history_chart_and_the_previous_run_compared_with_the_latest(
        fake: FakeJobsClient) -> None:
    fleet = await started(fake)
    vm = BenchmarksViewModel(fake, fleet.events)
    vm.show("alpha")
    await until(lambda: vm.state.value.runs)
    s = vm.state.value
    assert [r.id for r in s.runs] == ["benchmark.alpha.0002", "benchmark.alpha.0001"]
    assert s.chart("single_tps") == ((1000.0, 2000.0), (40.0, 50.0))
    assert s.compare_ids == ("benchmark.alpha.0001", "benchmark.alpha.0002")
    assert [(r.label, r.change) for r in s.rows][:2] == [("Tokens/s, one request", 1.25),
                                                         ("Tokens/s, all requests together", 0.9)]
    vm.select_compare("benchmark.alpha.0002", "benchmark.alpha.0001")
    assert vm.state.value.rows[0].change == 0.8
    vm.close()
    await stopped(fleet, fake)


async def test_a_run_is_followed_through_events_and_the_history_reloads_when_it_ends(
        fake: FakeJobsClient) -> None:
    fleet = await started(fake)
    vm = BenchmarksViewModel(fake, fleet.events)
    vm.show("alpha")
    await until(lambda: vm.state.value.runs)
    view = await vm.run_benchmark("throughput")
    assert fake.called("start_benchmark")[0][0].preset == "throughput"
    fake.advance(view.id, progress=0.5, phase="measuring", message="repetition 2: 4 at once")
    await until(lambda: vm.state.value.active is not None and vm.state.value.active.progress == 0.5)
    finished = []
    vm.finished.subscribe(finished.append)
    fake.finish(view.id, single_tps=55.0)
    await until(lambda: vm.state.value.active is None and len(vm.state.value.runs) == 3)
    assert vm.state.value.runs[0].summary == {"single_tps": 55.0} and finished[0].id == view.id
    vm.close()
    await stopped(fleet, fake)


async def test_the_wizard_walks_preset_search_plan_progress_results_and_applies(
        fake: FakeJobsClient) -> None:
    fleet = await started(fake)
    now = [1000.0]
    vm = TuningWizardViewModel(fake, fleet.events, "alpha", clock=lambda: now[0])
    vm.choose_preset("agents")
    vm.go(Step.SEARCH)
    vm.choose_search("full")
    await vm.make_plan()
    s = vm.state.value
    assert s.step == Step.PLAN and s.plan is not None and s.plan.eta_s == 270
    assert fake.called("plan_tune")[0][0].preset == "agents" and fake.called("plan_tune")[0][0].search == "full"
    await vm.start()
    job_id = vm.state.value.job.id
    assert vm.state.value.step == Step.PROGRESS
    fake.advance(job_id, progress=0.4, candidate="threads: threads=2 — Match the cores.", eta_s=120.0,
                 scores=[ScorePoint(label="#0", score=1.0), ScorePoint(label="#1", score=1.3)])
    await until(lambda: vm.state.value.job.progress == 0.4)
    assert vm.state.value.job.candidate.startswith("threads") and len(vm.state.value.job.scores) == 2
    assert vm.eta_text() == " · about 2 min 0 s left"
    now[0] += 45  # the daemon re-estimates only between candidates: the ETA still counts down
    assert vm.eta_text() == " · about 1 min 15 s left"
    fake.advance(job_id, progress=0.5)  # news without a new estimate does not reset the countdown
    await until(lambda: vm.state.value.job.progress == 0.5)
    assert vm.eta_text() == " · about 1 min 15 s left"
    now[0] += 500
    assert vm.eta_text() == " · almost done"
    fake.advance(job_id, eta_s=90.0)
    await until(lambda: vm.state.value.job.eta_s == 90.0)
    assert vm.eta_text() == " · about 1 min 30 s left"
    fake.finish(job_id, tuning_result("alpha", "0009", winner=True))
    await until(lambda: vm.state.value.step == Step.RESULTS)
    s = vm.state.value
    assert s.headline == "Found settings 28 % better than the saved ones."
    assert [(r.label, r.a, r.b) for r in s.rows()][:2] == [("Tokens/s, one request", 40.0, 60.0),
                                                           ("Tokens/s, all requests together", 100.0, 110.0)]
    await vm.apply(restart=True)
    assert fake.called("apply_job") == [(job_id, True)] and vm.state.value.applied
    assert fake.definitions["alpha"].settings.threads == 2
    vm.close()
    await stopped(fleet, fake)


async def test_a_run_without_a_winner_says_no_change_and_cancel_shows_the_end(
        fake: FakeJobsClient) -> None:
    fleet = await started(fake)
    vm = TuningWizardViewModel(fake, fleet.events, "alpha")
    await vm.start()
    job_id = vm.state.value.job.id
    fake.finish(job_id, tuning_result("alpha", "0010", winner=False))
    await until(lambda: vm.state.value.step == Step.RESULTS)
    assert vm.state.value.headline == "No change: the saved settings are already the best found."
    other = TuningWizardViewModel(fake, fleet.events, "alpha")
    await other.start()
    await other.cancel()
    assert fake.called("cancel_job") == [(other.state.value.job.id,)]
    assert other.state.value.step == Step.RESULTS and other.state.value.job.state.value == "cancelled"
    vm.close()
    other.close()
    await stopped(fleet, fake)
