"""Tuning a vLLM model in the app: the wizard's search texts and plan follow the model's runtime, and
the results (wizard and Benchmarks tab) name vLLM's settings the winner changes and the configuration
it runs, not llama.cpp's."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import definition
from fake_jobs import FakeJobsClient, tuning_result
from helpers import started, stopped, until
from PySide6.QtWidgets import QLabel

from agent.api.vllm import VllmSettings
from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import BENCHMARKS
from app.viewmodels.benchmarks import (
    BenchmarksViewModel,
    SettingChange,
    describe_changes,
    settings_changes,
)
from app.viewmodels.tuning import (
    SEARCH_TEXT,
    VLLM_SEARCH_TEXT,
    Step,
    TuningWizardViewModel,
)
from daemon.api.jobs import (
    CandidateResult,
    JobState,
    JobView,
    PlanStep,
    TuneRequest,
    TuningPlan,
    TuningResult,
)

SAVED = VllmSettings(max_num_seqs=16)
BEST = VllmSettings(max_num_seqs=64, kv_cache_dtype="fp8")
BEST_LINE = "kv_cache_dtype=fp8 max_num_seqs=64"


def vllm_result(model: str, stamp: str, *, winner: bool = True) -> TuningResult:
    base = {"single_tps": 80.0, "top_agg_tps": 400.0}
    best = {"single_tps": 82.0, "top_agg_tps": 560.0}
    candidates = [CandidateResult(index=0, step="baseline", vllm=SAVED, score=1.0, metrics=base,
                                  effective_config="max_num_seqs=16"),
                  CandidateResult(index=1, step="max_num_seqs", vllm=BEST, score=1.4, metrics=best,
                                  effective_config=BEST_LINE)]
    confirmation = [c.model_copy(update={"step": "confirmation"}) for c in candidates]
    return TuningResult(model=model, stamp=stamp, started_at=time.time(), runtime="vllm", saved_vllm=SAVED,
                        candidates=candidates, confirmation=confirmation if winner else [],
                        winner=1 if winner else None, winner_vllm=BEST if winner else None,
                        gain=1.4 if winner else None,
                        decision="#1 beats the baseline by 40.0 %" if winner else "no change: nothing beat it")


class VllmJobsClient(FakeJobsClient):
    """The fake daemon with jobs, planning as the daemon does for a vLLM model."""

    async def plan_tune(self, request: TuneRequest) -> TuningPlan:
        self._record("plan_tune", request)
        steps = [PlanStep(dimension="max_num_seqs", values=["max_num_seqs=8", "max_num_seqs=32"],
                          goal="Fill the GPU with concurrent sequences.", tradeoff="More sequences, more KV cache."),
                 PlanStep(dimension="speculative", values=["mtp=1", "mtp=2"], goal="MTP heads draft tokens.",
                          tradeoff="Drafts cost compute when rejected.")]
        return TuningPlan(model=request.model, preset=request.preset, search=request.search, steps=steps,
                          candidates=5, confirmations=3, start_s=60, benchmark_s=40, eta_s=800,
                          notes=["KV cache dtype fp8 left out: the model fits without it"])


def vllm_model() -> Any:
    return definition("vl", runtime="vllm", model_path="/models/Qwen3-8B", image="vllm/vllm-openai:v0.9.1",
                      vllm=SAVED)


@pytest.fixture
def fake() -> VllmJobsClient:
    return VllmJobsClient([vllm_model(), definition("alpha")])


# --- view-models ----------------------------------------------------------------------------------
def test_the_changes_come_from_the_runtimes_own_settings() -> None:
    assert settings_changes(vllm_result("vl", "1")) == (
        SettingChange("vllm.kv_cache_dtype", "--kv-cache-dtype", "default", "fp8"),
        SettingChange("vllm.max_num_seqs", "--max-num-seqs", "16", "64"))
    assert describe_changes(vllm_result("vl", "1")) == [
        "vLLM settings the best run changes:", "  --kv-cache-dtype: default → fp8", "  --max-num-seqs: 16 → 64",
        f"  vLLM runs it as: {BEST_LINE}"]
    assert describe_changes(vllm_result("vl", "2", winner=False)) == ["vLLM: the saved settings stay."]
    llama = tuning_result("alpha", "3", winner=True)
    assert settings_changes(llama) == (SettingChange("threads", "--threads", "4", "2"),)
    assert describe_changes(llama) == ["llama.cpp settings the best run changes:", "  --threads: 4 → 2"]


async def test_the_wizard_follows_a_vllm_model_from_search_to_apply(fake: VllmJobsClient) -> None:
    fleet = await started(fake)
    vm = TuningWizardViewModel(fake, fleet.events, "vl")
    assert vm.state.value.search_text == SEARCH_TEXT  # before the model is read
    await vm.load_model()
    s = vm.state.value
    assert s.runtime == "vllm" and s.runtime_label == "vLLM" and s.search_text == VLLM_SEARCH_TEXT
    vm.go(Step.SEARCH)
    await vm.make_plan()
    assert [st.dimension for st in vm.state.value.plan.steps] == ["max_num_seqs", "speculative"]
    await vm.start()
    job_id = vm.state.value.job.id
    fake.finish(job_id, vllm_result("vl", "0001"))
    await until(lambda: vm.state.value.step == Step.RESULTS)
    s = vm.state.value
    assert [c.key for c in s.changes()] == ["vllm.kv_cache_dtype", "vllm.max_num_seqs"]
    assert [(r.label, r.a, r.b) for r in s.rows()][1] == ("Tokens/s, all requests together", 400.0, 560.0)
    await vm.apply(restart=False)
    assert fake.definitions["vl"].vllm == BEST and fake.definitions["vl"].settings.threads is None
    vm.close()
    await stopped(fleet, fake)


async def test_the_benchmarks_tab_reads_the_newest_tuning_in_full(fake: VllmJobsClient) -> None:
    now = time.time()
    fake.jobs = {v.id: v for v in (
        JobView(id="tune.vl.0001", kind="tune", model="vl", state=JobState.SUCCEEDED, started_at=now - 100,
                finished_at=now - 50, result=vllm_result("vl", "0001", winner=False)),
        JobView(id="tune.vl.0002", kind="tune", model="vl", state=JobState.SUCCEEDED, started_at=now - 40,
                finished_at=now - 10, result=vllm_result("vl", "0002")))}
    fleet = await started(fake)
    vm = BenchmarksViewModel(fake, fleet.events)
    vm.show("vl")
    await until(lambda: vm.state.value.last_tuning is not None, what="the newest tuning run")
    s = vm.state.value
    assert s.last_tuning is not None and s.last_tuning.stamp == "0002"
    assert s.tuning_lines[0] == "Last tuning (vLLM, interactive, quick): #1 beats the baseline by 40.0 %"
    assert "  --max-num-seqs: 16 → 64" in s.tuning_lines
    vm.show("alpha")  # no tuning run: nothing to say
    await until(lambda: not vm.state.value.loading)
    assert vm.state.value.tuning_lines == ()
    vm.close()
    await stopped(fleet, fake)


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(fake: VllmJobsClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(fake, size=(1280, 800))


@pytest.mark.gui
def test_the_wizard_shows_vllms_search_plan_and_changed_settings(
        window: MainWindow, fake: VllmJobsClient, qtbot: Any) -> None:
    window.show_page("models")
    panel = window.models.panel
    window.models.select("vl")
    panel.tabs.setCurrentIndex(BENCHMARKS)
    qtbot.waitUntil(lambda: panel.benchmarks.model_id == "vl")
    panel.benchmarks.tune_button.click()
    wizard = panel.benchmarks.wizard
    qtbot.waitUntil(wizard.isVisible)
    quick = wizard.findChild(QLabel, "choice-quick-text")
    qtbot.waitUntil(lambda: quick.text() == VLLM_SEARCH_TEXT["quick"])
    wizard.next.click()
    wizard.next.click()  # quick search → the plan
    qtbot.waitUntil(lambda: "max_num_seqs=8, max_num_seqs=32" in wizard.plan_text.text())
    plan = wizard.plan_text.text()
    assert plan.startswith("vLLM · preset: interactive") and "• speculative: mtp=1, mtp=2" in plan
    assert "threads" not in plan
    wizard.next.click()  # Start tuning
    qtbot.waitUntil(lambda: len(fake.called("start_tune")) == 1)
    job_id = next(j for j in fake.jobs if j.startswith("tune."))
    fake.finish(job_id, vllm_result("vl", "0004"))
    qtbot.waitUntil(lambda: wizard.changes.isVisible())
    text = wizard.changes.text()
    assert "--max-num-seqs: 16 → 64" in text and f"vLLM runs it as: {BEST_LINE}" in text and "--threads" not in text
    wizard.close()

    qtbot.waitUntil(lambda: panel.benchmarks.tuning.isVisible())
    assert "Last tuning (vLLM" in panel.benchmarks.tuning.text()
