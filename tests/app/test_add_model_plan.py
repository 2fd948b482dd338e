"""The add-model wizard's "how it runs here": the daemon's plan listed option by option, the picked
option's node and llama.cpp settings saved with the model, and a plan that fails shown without
blocking the add."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from helpers import add_model_dialog
from PySide6.QtCore import Qt

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import GgufSummary
from app.context import AppContext
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from daemon.api.client import DaemonError
from daemon.api.nodes import NodeState, NodeView, RuntimeOffer
from daemon.api.plan import NodePlan, NodePlanError, Plan, PlanOption, PlanQuery

BOX = "b" * 64
FILE = "/models/tiny-Q4_K_M.gguf"


def gpu_box() -> NodeView:
    return NodeView(id=BOX, name="gpu-box", state=NodeState.ONLINE, address="10.0.0.9:9443", runtimes=[
        RuntimeOffer(runtime="llamacpp", available=True, version="b4242", location="/opt/llama-server")])


def two_node_plan() -> Plan:
    """The local machine can only run it once room is made; gpu-box splits it over two GPUs, free now."""
    summary = GgufSummary(architecture="llama", file_size=20 << 30, tensor_bytes=20 << 30, tensor_count=400,
                           block_count=40)
    split = LlamaCppSettings(gpus=[0, 1], split_mode="layer", tensor_split="3,1", main_gpu=0, n_gpu_layers=41,
                             ctx_size=16384)
    return Plan(source=FILE, summary=summary, nodes=[
        NodePlan(node="local", summary=summary, options=[
            PlanOption(kind="partial", label="GPU 0, 20 of 41 layers", node="local", gpus=[0], state="needs_room",
                       ctx_size=8192, max_ctx_size=0, max_ctx_size_empty=8192, n_gpu_layers=20,
                       settings=LlamaCppSettings(gpus=[0], n_gpu_layers=20, ctx_size=8192),
                       args=["--device", "CUDA0", "--n-gpu-layers", "20"]),
            PlanOption(kind="cpu", label="CPU only", node="local", state="too_big", ctx_size=0, max_ctx_size=0,
                       max_ctx_size_empty=0, message="needs 22.1 GiB, 16 GiB usable")]),
        NodePlan(node=BOX, summary=summary, options=[
            PlanOption(kind="split", label="GPUs 0 and 1 by layers", node=BOX, gpus=[0, 1], state="free",
                       ctx_size=16384, max_ctx_size=16384, max_ctx_size_empty=65536, n_gpu_layers=41,
                       settings=split, args=["--device", "CUDA0,CUDA1", "--split-mode", "layer",
                                             "--tensor-split", "3,1"])])],
        fleet=[PlanOption(kind="nodes", label="Across nodes", state="unavailable", ctx_size=0, max_ctx_size=0,
                          max_ctx_size_empty=0, message="needs llama.cpp's RPC")],
        errors=[NodePlanError(node="c" * 64, code="node_offline", message="the node is offline")])


class PlannedDaemon(FakeDaemonClient):
    """The fake daemon answering ``plan`` with a plan the test made (the demo's has one node)."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.planned = plan

    async def plan(self, query: PlanQuery) -> Plan:
        self._record("plan", query)
        return self.planned


async def wizard(fake: FakeDaemonClient, path: str = FILE) -> AddModelViewModel:
    vm = AddModelViewModel(fake)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("path", path)
    return vm


async def test_each_option_is_listed_and_the_best_is_picked(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake)
    assert vm.state.value.can_plan
    plan = await vm.check_plan()
    assert plan is not None
    query = fake.called("plan")[0][0]
    assert (query.node, query.model_path, query.ctx_size) == (None, FILE, None), "every node is asked"
    s = vm.state.value
    gpu, cpu = s.plan_rows
    assert gpu.startswith("This machine: GPU 0 (NVIDIA GeForce RTX 4090) · GPU · 32768 tokens of context "
                          "(largest now 32768, empty 131072) · free now · --device CUDA0 --n-gpu-layers 29")
    assert cpu.startswith("This machine: CPU only · CPU · 32768 tokens of context") and "--device none" in cpu
    assert s.picked == 0 and s.picked_option is not None and s.picked_option.kind == "gpu"
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert (saved.node, saved.settings.gpus, saved.settings.n_gpu_layers, saved.settings.ctx_size) == (
        "local", [0], 29, 32768)
    vm.close()


async def test_the_option_picked_gives_the_model_its_node_and_gpu_settings() -> None:
    fake = PlannedDaemon(two_node_plan())
    fake.nodes.append(gpu_box())
    vm = await wizard(fake)
    vm.set_field("ctx_size", "8192")
    await vm.check_plan()
    s = vm.state.value
    assert fake.called("plan")[0][0].ctx_size == 8192
    assert len(s.plan_rows) == 4
    assert s.plan_rows[0].startswith("This machine: GPU 0, 20 of 41 layers · partial offload") and "needs room" in \
        s.plan_rows[0]
    assert "too big" in s.plan_rows[1] and "needs 22.1 GiB" in s.plan_rows[1]
    assert s.plan_rows[2].startswith("gpu-box: GPUs 0 and 1 by layers · split across GPUs · 16384 tokens")
    assert s.plan_rows[3].startswith("Across nodes: Across nodes") and "not available yet" in s.plan_rows[3]
    assert s.picked == 2 and s.node == BOX, "the best is the one free now"
    assert "could not say: the node is offline" in s.plan_note
    with pytest.raises(ValueError, match="too big"):
        vm.pick_option(1)
    with pytest.raises(ValueError, match="not available yet"):
        vm.pick_option(3)
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert saved.node == BOX
    assert (saved.settings.gpus, saved.settings.split_mode, saved.settings.tensor_split, saved.settings.main_gpu,
            saved.settings.n_gpu_layers) == ([0, 1], "layer", "3,1", 0, 41)
    assert saved.settings.ctx_size == 8192, "the context typed is kept"

    vm.pick_option(0)  # once room is made, on this machine
    assert vm.state.value.node == "local"
    vm.set_field("model_id", "tiny-local")
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert (saved.node, saved.settings.gpus, saved.settings.n_gpu_layers, saved.settings.split_mode) == (
        "local", [0], 20, None)
    vm.close()


async def test_a_new_question_drops_the_old_plan_and_a_node_typed_drops_the_pick(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake)
    await vm.check_plan()
    vm.set_field("node", "local")
    assert vm.state.value.picked is None and vm.state.value.plan is not None
    await vm.add()
    assert fake.called("create_model")[-1][0].settings.gpus is None, "no option picked: the settings as typed"
    vm.set_field("path", "/models/other.gguf")
    assert vm.state.value.plan is None and vm.state.value.plan_rows == ()
    vm.set_field("path", "/models/folder")
    assert not vm.state.value.can_plan, "the plan reads a GGUF header"
    vm.close()


async def test_a_failing_plan_is_shown_and_the_model_can_still_be_added(fake: FakeDaemonClient) -> None:
    vm = await wizard(fake)
    vm.set_field("ctx_size", "4096")
    fake.fail_next["plan"] = DaemonError(502, "no_nodes", "no node could read the file")
    assert await vm.check_plan() is None
    s = vm.state.value
    assert s.plan_error == "no node could read the file" and not s.planning and s.plan_rows == ()
    assert s.plan_note.startswith("No plan: no node could read the file") and "still add" in s.plan_note
    assert s.can_add and s.error is None
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert (saved.node, saved.settings.ctx_size, saved.settings.gpus) == ("local", 4096, None)
    vm.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(fake: FakeDaemonClient, open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext]:
    win = open_main_window(fake)
    return win, win.ctx


@pytest.mark.gui
def test_the_wizard_lists_the_plan_and_saves_the_option_clicked(window: tuple[MainWindow, AppContext],
                                                                fake: FakeDaemonClient, qtbot: Any) -> None:
    win, ctx = window
    with add_model_dialog(ctx, win) as dialog:
        qtbot.waitUntil(lambda: bool(dialog.vm.state.value.nodes))
        assert dialog.plan_button.isVisible() and not dialog.plan_button.isEnabled(), "no Hugging Face file named"
        dialog.source_buttons.button(1).click()  # a file on the node
        assert dialog.plan_button.isVisible() and not dialog.plan_button.isEnabled()
        qtbot.keyClicks(dialog.path, FILE)
        assert dialog.plan_button.isEnabled() and not dialog.plan_list.isVisible()
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_list.count() == 2)
        assert dialog.plan_list.isVisible() and dialog.plan_list.currentRow() == 0
        assert dialog.node.text() == "local", "the Node field shows where the option picked runs"
        assert dialog.plan_list.item(0).text().startswith("This machine: GPU 0 (NVIDIA GeForce RTX 4090) · GPU")
        assert "free now" in dialog.plan_list.item(1).text()
        dialog.plan_list.setCurrentRow(1)  # the CPU
        assert dialog.vm.state.value.picked == 1
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(fake.called("create_model")))
        saved = fake.called("create_model")[0][0]
        assert (saved.node, saved.settings.gpus, saved.settings.n_gpu_layers, saved.settings.ctx_size) == (
            "local", [], 0, 32768)


@pytest.mark.gui
def test_the_wizard_says_why_there_is_no_plan(window: tuple[MainWindow, AppContext], fake: FakeDaemonClient,
                                              qtbot: Any) -> None:
    win, ctx = window
    with add_model_dialog(ctx, win) as dialog:
        dialog.source_buttons.button(1).click()
        qtbot.keyClicks(dialog.path, FILE)
        fake.fail_next["plan"] = DaemonError(503, "no_nodes", "no node is online")
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_note.isVisible())
        assert dialog.plan_note.text().startswith("No plan: no node is online")
        assert dialog.plan_note.property("role") == "error" and not dialog.plan_list.isVisible()
        assert dialog.add_button.isEnabled() and dialog.plan_button.isEnabled()
