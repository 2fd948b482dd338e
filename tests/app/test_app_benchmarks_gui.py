"""The Benchmarks tab and the tuning wizard, offscreen, over the fake daemon with jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import definition
from fake_jobs import FakeJobsClient, benchmark_view, tuning_result
from helpers import cells
from PySide6.QtWidgets import QLabel

from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import BENCHMARKS
from daemon.api.jobs import ScorePoint

pytestmark = pytest.mark.gui


@pytest.fixture
def fake() -> FakeJobsClient:
    client = FakeJobsClient([definition("alpha")])
    client.jobs = {v.id: v for v in (
        benchmark_view("alpha", "0001", 1000.0, single_tps=40.0, top_agg_tps=100.0, objective_score=0.75),
        benchmark_view("alpha", "0002", 2000.0, single_tps=50.0, top_agg_tps=90.0, objective_score=0.75))}
    return client


@pytest.fixture
def window(fake: FakeJobsClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(fake, size=(1280, 800))


def test_the_benchmarks_tab_lists_runs_compares_them_and_follows_a_new_one(
        window: MainWindow, fake: FakeJobsClient, qtbot: Any) -> None:
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
    tab.run_button.click()
    qtbot.waitUntil(lambda: len(fake.called("start_benchmark")) == 1)
    assert fake.called("start_benchmark")[0][0].preset == "interactive"
    job_id = next(j for j in fake.jobs if j.endswith("0003"))
    fake.advance(job_id, progress=0.5, phase="measuring", message="repetition 1: 4 at once", eta_s=30.0)
    qtbot.waitUntil(lambda: tab.progress.value() == 500)
    assert tab.progress.isVisible() and "repetition 1" in tab.status.text() and not tab.run_button.isEnabled()
    fake.finish(job_id, single_tps=60.0)
    qtbot.waitUntil(lambda: tab.table.rowCount() == 3)
    assert tab.run_button.isEnabled() and not tab.progress.isVisible()
    assert fake.called("start_benchmark")[0][0].suite.overhead_rounds == 0  # not asked: not measured
    tab.overhead.setChecked(True)  # what the router adds, measured with the run
    tab.run_button.click()
    qtbot.waitUntil(lambda: len(fake.called("start_benchmark")) == 2)
    assert fake.called("start_benchmark")[1][0].suite.overhead_rounds == 10


def test_the_tuning_wizard_plans_shows_progress_and_applies_the_winner(
        window: MainWindow, fake: FakeJobsClient, qtbot: Any) -> None:
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
    qtbot.waitUntil(lambda: "threads=1, threads=2" in wizard.plan_text.text())
    assert "4 min 30 s" in wizard.plan_text.text() and fake.called("plan_tune")[0][0].preset == "agents"
    wizard.next.click()  # Start tuning
    qtbot.waitUntil(lambda: len(fake.called("start_tune")) == 1)
    job_id = next(j for j in fake.jobs if j.startswith("tune."))
    fake.advance(job_id, progress=0.3, phase="measuring alpha-tune-2", candidates_done=1, candidates_total=6,
                 candidate="threads: threads=2 — Match the cores.", scores=[ScorePoint(label="#0", score=1.0)])
    qtbot.waitUntil(lambda: "candidate 1 of 6" in wizard.phase.text())
    assert wizard.candidate.text().startswith("threads: threads=2") and wizard.chart.scores == (("#0", 1.0),)
    assert wizard.cancel.isVisible()
    fake.finish(job_id, tuning_result("alpha", "0004", winner=True))
    qtbot.waitUntil(lambda: wizard.headline.text() == "Found settings 28 % better than the saved ones.")
    assert cells(wizard.results)[0] == ["Tokens/s, one request", "40.0 tok/s", "60.0 tok/s", "+50 %"]
    assert wizard.apply.isVisible()
    wizard.apply.click()
    qtbot.waitUntil(lambda: fake.called("apply_job") == [(job_id, True)])
    qtbot.waitUntil(lambda: not wizard.apply.isEnabled())
    assert any("beats the baseline" in w.text() for w in wizard.findChildren(QLabel))
    wizard.close()
