"""Tuning a vLLM model in the app: the wizard's search texts and plan follow the model's runtime, and
the results (wizard and Benchmarks tab) name vLLM's settings the winner changes and the configuration
it runs, not llama.cpp's."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from helpers import definition, started, until
from PySide6.QtWidgets import QLabel
from real_daemon import (
    HeldTuning,
    RealDaemon,
    ask,
    daemon_in_thread,
    held_tuning,
    stored_runs,
    tuning_result,
)

from agent.api.models import GpuInfo
from agent.api.vllm import SpeculativeSettings, VllmSettings
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
from daemon.api.client import DaemonClient
from daemon.api.jobs import CandidateResult, TuneRequest, TuningResult
from daemon.api.models import ModelDefinition
from tests.fakes import write_fake_runtime
from tests.fakes.fake_docker_engine import FakeDockerEngine
from tests.fakes.gguf_files import gguf_bytes

SAVED = VllmSettings(max_num_seqs=16)
BEST = VllmSettings(max_num_seqs=64, kv_cache_dtype="fp8")
BEST_LINE = "kv_cache_dtype=fp8 max_num_seqs=64"
IMAGE = "vllm/vllm-openai:v0.9.1"
# vl's saved settings: its MTP head in use (proof enough of one: the daemon cannot read the node's config.json)
MODEL_SAVED = SAVED.model_copy(update={"speculative": SpeculativeSettings(method="mtp", num_speculative_tokens=2)})
CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 64, "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
          "mtp_num_hidden_layers": 1}  # the model folder on the node


def vllm_result(model: str, stamp: str, *, winner: bool = True, started_at: float | None = None) -> TuningResult:
    base = {"single_tps": 80.0, "top_agg_tps": 400.0}
    best = {"single_tps": 82.0, "top_agg_tps": 560.0}
    candidates = [CandidateResult(index=0, step="baseline", vllm=SAVED, score=1.0, metrics=base,
                                  effective_config="max_num_seqs=16"),
                  CandidateResult(index=1, step="max_num_seqs", vllm=BEST, score=1.4, metrics=best,
                                  effective_config=BEST_LINE)]
    confirmation = [c.model_copy(update={"step": "confirmation"}) for c in candidates]
    return TuningResult(model=model, stamp=stamp, started_at=started_at or time.time(), runtime="vllm",
                        saved_vllm=SAVED, candidates=candidates, confirmation=confirmation if winner else [],
                        winner=1 if winner else None, winner_vllm=BEST if winner else None,
                        gain=1.4 if winner else None,
                        decision="#1 beats the baseline by 40.0 %" if winner else "no change: nothing beat it")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """A real daemon with its local agent (alpha, a llama.cpp model on the fake llama-server) and a node,
    "gpu-box" (a real agent whose GPU probe reports an 80 GiB GPU and whose Docker engine, the fake one,
    holds the vLLM image): vl, a vLLM model there (a folder with its config.json). A vLLM run needs a
    real engine and GPU, so a tuning run of it holds where it measures (``held_tuning``)."""
    root = tmp_path_factory.mktemp("tuning-vllm")
    folder = root / "models" / "Qwen3-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    with open(folder / "model.safetensors", "wb") as weights:
        weights.truncate(2**30)  # sparse: its size is what counts
    (root / "models" / "alpha.gguf").write_bytes(gguf_bytes())
    with daemon_in_thread(root / "home", write_fake_runtime(root / "runtime")) as found:
        engine = found.call(lambda _deps: FakeDockerEngine(root / "docker.sock", IMAGE,
                                                           {"ai.vllm.version": "0.9.1"}).start())
        try:
            gpu_box = found.add_node("gpu-box", [GpuInfo(index=0, name="H100", memory_total=80 * 2**30)],
                                     docker_socket=str(root / "docker.sock"), vllm_image=IMAGE)
            found.vl = ModelDefinition(id="vl", served_name="vl", runtime="vllm", model_path=str(folder),  # type: ignore[attr-defined]
                                       node=gpu_box, image=IMAGE, vllm=MODEL_SAVED, memory_budget_gib=3.0)
            alpha = definition("alpha", model_path=str(root / "models" / "alpha.gguf"))
            found.call(lambda deps: deps.registry.add(found.vl))  # type: ignore[attr-defined]
            found.call(lambda deps: deps.registry.add(alpha))
            yield found
        finally:
            found.call(lambda _deps: engine.close())


def _fresh(served: RealDaemon) -> None:
    """No stored runs; vl with its saved settings."""
    def forget(deps: Any) -> None:
        for folder in ("benchmarks", "tuning"):
            shutil.rmtree(deps.jobs.store.home / folder, ignore_errors=True)

    served.call(forget)
    if ask(served, lambda c: c.get_model("vl")).definition.vllm != MODEL_SAVED:
        ask(served, lambda c: c.update_model(served.vl))  # type: ignore[attr-defined]


@pytest.fixture
async def daemon(served: RealDaemon) -> AsyncIterator[DaemonClient]:
    _fresh(served)
    client = DaemonClient(*served, client_name="app")
    yield client
    await client.close()


@pytest.fixture
def tuning(served: RealDaemon) -> Iterator[HeldTuning]:
    with held_tuning(served) as held:
        yield held


def quick_plan(served: RealDaemon) -> Any:
    """The daemon's own quick plan for vl."""
    return ask(served, lambda c: c.plan_tune(TuneRequest(model="vl")))


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


async def test_the_wizard_follows_a_vllm_model_from_search_to_apply(
        daemon: DaemonClient, served: RealDaemon, tuning: HeldTuning) -> None:
    fleet = await started(daemon)
    vm = TuningWizardViewModel(daemon, fleet.events, "vl")
    assert vm.state.value.search_text == SEARCH_TEXT  # before the model is read
    await vm.load_model()
    s = vm.state.value
    assert s.runtime == "vllm" and s.runtime_label == "vLLM" and s.search_text == VLLM_SEARCH_TEXT
    vm.go(Step.SEARCH)
    await vm.make_plan()
    assert [st.dimension for st in vm.state.value.plan.steps] == ["max_num_seqs", "speculative"]  # type: ignore[union-attr]
    await vm.start()
    job_id = vm.state.value.job.id  # type: ignore[union-attr]
    tuning.finish(job_id, vllm_result("vl", "-"))
    await until(lambda: vm.state.value.step == Step.RESULTS, timeout=10)
    s = vm.state.value
    assert [c.key for c in s.changes()] == ["vllm.kv_cache_dtype", "vllm.max_num_seqs"]
    assert [(r.label, r.a, r.b) for r in s.rows()][1] == ("Tokens/s, all requests together", 400.0, 560.0)
    await vm.apply(restart=False)
    assert vm.state.value.applied and vm.state.value.error is None
    saved = (await daemon.get_model("vl")).definition  # what the daemon saved
    assert saved.vllm == MODEL_SAVED.model_copy(update={"max_num_seqs": 64, "kv_cache_dtype": "fp8"})  # what won
    assert saved.settings.threads is None
    vm.close()
    await fleet.stop()


async def test_the_benchmarks_tab_reads_the_newest_tuning_in_full(daemon: DaemonClient, served: RealDaemon) -> None:
    now = time.time()
    stored_runs(served, vllm_result("vl", "0001", winner=False, started_at=now - 100),
                vllm_result("vl", "0002", started_at=now - 40))
    fleet = await started(daemon)
    vm = BenchmarksViewModel(daemon, fleet.events)
    vm.show("vl")
    await until(lambda: vm.state.value.last_tuning is not None, timeout=10, what="the newest tuning run")
    s = vm.state.value
    assert s.last_tuning is not None and s.last_tuning.stamp == "0002"
    assert s.tuning_lines[0] == "Last tuning (vLLM, interactive, quick): #1 beats the baseline by 40.0 %"
    assert "  --max-num-seqs: 16 → 64" in s.tuning_lines
    vm.show("alpha")  # no tuning run: nothing to say
    await until(lambda: not vm.state.value.loading, timeout=10)
    assert vm.state.value.tuning_lines == ()
    vm.close()
    await fleet.stop()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(served: RealDaemon, qloop: Any, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    _fresh(served)
    return open_main_window(DaemonClient(*served, client_name="app"), size=(1280, 800))


@pytest.mark.gui
def test_the_wizard_shows_vllms_search_plan_and_changed_settings(
        window: MainWindow, served: RealDaemon, tuning: HeldTuning, qtbot: Any) -> None:
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
    steps = {step.dimension: ", ".join(step.values) for step in quick_plan(served).steps}  # the daemon's own
    qtbot.waitUntil(lambda: f"• max_num_seqs: {steps['max_num_seqs']}" in wizard.plan_text.text(), timeout=10_000)
    plan = wizard.plan_text.text()
    assert plan.startswith("vLLM · preset: interactive") and f"• speculative: {steps['speculative']}" in plan
    assert "mtp×1" in plan and "threads" not in plan
    wizard.next.click()  # Start tuning
    qtbot.waitUntil(lambda: wizard.vm.state.value.job is not None, timeout=10_000)
    job_id = wizard.vm.state.value.job.id
    assert ask(served, lambda c: c.get_model("vl")).status.busy == f"tuning (job {job_id})"  # the daemon's job
    tuning.finish(job_id, vllm_result("vl", "-"))
    qtbot.waitUntil(lambda: wizard.changes.isVisible())
    text = wizard.changes.text()
    assert "--max-num-seqs: 16 → 64" in text and f"vLLM runs it as: {BEST_LINE}" in text and "--threads" not in text
    wizard.close()

    qtbot.waitUntil(lambda: panel.benchmarks.tuning.isVisible())
    assert "Last tuning (vLLM" in panel.benchmarks.tuning.text()
