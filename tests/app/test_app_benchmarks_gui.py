"""The Benchmarks tab and the tuning wizard, offscreen, over the real daemon: its local agent runs alpha
on the fake llama-server and benchmarks it for real; a tuning run holds where it measures
(``real_daemon.held_tuning``) and the test moves it along."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import cells
from PySide6.QtWidgets import QLabel
from real_daemon import (
    HeldTuning,
    RealDaemon,
    ask,
    benchmark_result,
    benchmarks_client,
    benchmarks_daemon,
    held_tuning,
    stored_runs,
    tuning_result,
)

from app import format as fmt
from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import BENCHMARKS
from daemon.api.client import DaemonClient
from daemon.api.jobs import BenchmarkResult, JobState, ScorePoint, TuneRequest

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    with benchmarks_daemon(tmp_path_factory.mktemp("benchmarks-gui")) as found:
        yield found


def _run(qtbot: Any, work: Any, timeout: int = 60_000) -> Any:
    """Await ``work`` on the qasync loop that Qt's events drive."""
    task = asyncio.ensure_future(work)
    qtbot.waitUntil(task.done, timeout=timeout)
    return task.result()


@pytest.fixture
def window(served: RealDaemon, qloop: Any, qtbot: Any, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    """The main window over the app's client; alpha running, two stored runs of it."""
    client = _run(qtbot, benchmarks_client(served))
    stored_runs(served, benchmark_result("alpha", "0001", 1000.0, single_tps=40.0, top_agg_tps=100.0, objective_score=0.75),
                benchmark_result("alpha", "0002", 2000.0, single_tps=50.0, top_agg_tps=90.0, objective_score=0.75))
    return open_main_window(client, size=(1280, 800))


@pytest.fixture
def tuning(served: RealDaemon) -> Iterator[HeldTuning]:
    with held_tuning(served) as held:
        yield held


def _newest(served: RealDaemon) -> BenchmarkResult:
    """The newest benchmark run of alpha the daemon holds, in full."""
    async def read(client: DaemonClient) -> BenchmarkResult:
        newest = (await client.list_jobs("alpha"))[0]
        result = (await client.get_job(newest.id)).result
        assert isinstance(result, BenchmarkResult)
        return result

    return ask(served, read)


def test_the_benchmarks_tab_lists_runs_compares_them_and_follows_a_new_one(
        window: MainWindow, served: RealDaemon, qtbot: Any) -> None:
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(BENCHMARKS)
    tab = panel.benchmarks
    qtbot.waitUntil(lambda: tab.table.rowCount() == 2)
    assert [row[1:4] for row in cells(tab.table)] == [["interactive", "50.0", "90.0"],
                                                     ["interactive", "40.0", "100"]]
    assert cells(tab.compare_table)[0] == ["Tokens/s, one request", "40.0 tok/s", "50.0 tok/s", "+25 %"]
    assert tab.chart.points == 2 and tab.status.text() == "2 runs"
    header = tab.table.horizontalHeader()
    for column in range(tab.table.columnCount() - 1):  # each header is read whole, not "irst token m"
        title = tab.table.horizontalHeaderItem(column).text()
        assert header.sectionSize(column) >= header.fontMetrics().horizontalAdvance(title), title
    tab.run_button.click()  # a real run of the fake runtime, a token every 10 ms
    qtbot.waitUntil(lambda: tab.progress.isVisible() and 0 < tab.progress.value() < 1000
                    and "repetition 1" in tab.status.text(), timeout=60_000)
    assert not tab.run_button.isEnabled()
    qtbot.waitUntil(lambda: tab.table.rowCount() == 3, timeout=120_000)
    assert tab.run_button.isEnabled() and not tab.progress.isVisible()
    newest = _newest(served)
    assert newest.preset == "interactive" and newest.metrics["single_tps"] > 0
    assert newest.overhead is None  # not asked: not measured
    assert cells(tab.table)[0][1] == "interactive"
    tab.overhead.setChecked(True)  # what the router adds, measured with the run
    tab.run_button.click()
    qtbot.waitUntil(lambda: tab.table.rowCount() == 4, timeout=120_000)
    newest = _newest(served)
    assert newest.overhead is not None and newest.overhead.rounds == 10


def test_the_tuning_wizard_plans_shows_progress_and_applies_the_winner(
        window: MainWindow, served: RealDaemon, tuning: HeldTuning, qtbot: Any) -> None:
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(BENCHMARKS)
    panel.benchmarks.tune_button.click()
    wizard = panel.benchmarks.wizard
    qtbot.waitUntil(wizard.isVisible)
    agents = wizard.preset_group.buttons()[1]
    assert agents.text() == "Agents && tools", "an escaped &: it reads 'Agents & tools', not 'Agents _tools'"
    agents.click()
    wizard.next.click()
    wizard.next.click()  # quick search → the plan
    plan = ask(served, lambda c: c.plan_tune(TuneRequest(model="alpha", preset="agents", search="quick")))
    first = f"• {plan.steps[0].dimension}: {', '.join(plan.steps[0].values)}"  # the daemon's own plan
    qtbot.waitUntil(lambda: first in wizard.plan_text.text(), timeout=10_000)
    assert "preset: agents · quick search" in wizard.plan_text.text()
    assert f"Estimated time: {fmt.duration(plan.eta_s)}" in wizard.plan_text.text()
    wizard.next.click()  # Start tuning
    qtbot.waitUntil(lambda: wizard.vm.state.value.job is not None, timeout=10_000)
    job_id = wizard.vm.state.value.job.id
    assert ask(served, lambda c: c.get_model("alpha")).status.busy == f"tuning (job {job_id})"  # the daemon's job
    tuning.advance(job_id, progress=0.3, phase="measuring alpha-tune-2", candidates_done=1, candidates_total=6,
                   candidate="threads: threads=2 — Match the cores.", scores=[ScorePoint(label="#0", score=1.0)])
    qtbot.waitUntil(lambda: "candidate 1 of 6" in wizard.phase.text())
    assert wizard.candidate.text().startswith("threads: threads=2") and wizard.chart.scores == (("#0", 1.0),)
    assert wizard.cancel.isVisible()
    tuning.finish(job_id, tuning_result("alpha", "-", winner=True))
    qtbot.waitUntil(lambda: wizard.headline.text() == "Found settings 28 % better than the saved ones.")
    assert cells(wizard.results)[0] == ["Tokens/s, one request", "40.0 tok/s", "60.0 tok/s", "+50 %"]
    assert ask(served, lambda c: c.get_job(job_id)).state == JobState.SUCCEEDED  # stored as the daemon's run
    assert wizard.apply.isVisible()
    wizard.apply.click()
    qtbot.waitUntil(lambda: not wizard.apply.isEnabled(), timeout=30_000)
    assert ask(served, lambda c: c.get_model("alpha")).definition.settings.threads == 2  # the winner, saved
    assert any("beats the baseline" in w.text() for w in wizard.findChildren(QLabel))
    wizard.close()
