"""One model across nodes in the app: the add-model wizard lists the daemon's split (each node's
layers), picking it saves the model on the main node with its helpers (``rpc_nodes``) and the
main node's part as its memory budget, the model editor shows and edits the helpers, the model
panel lists them with their state, and the demo daemon reports them in a model's status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from helpers import add_model_dialog
from PySide6.QtCore import Qt

from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import GgufSummary
from app.context import AppContext
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.settings_form import SettingsForm
from daemon.api.models import ModelState
from daemon.api.nodes import NodeState, NodeView, RuntimeOffer
from daemon.api.plan import NodePlan, NodeShare, Plan, PlanOption, PlanQuery
from daemon.api.rpc_split import RpcHelper

MAIN, HELPER = "a" * 64, "b" * 64
FILE = "/models/big-Q4_K_M.gguf"
GiB = 1 << 30


def box(node_id: str, name: str) -> NodeView:
    return NodeView(id=node_id, name=name, state=NodeState.ONLINE, address="10.0.0.9:9443", runtimes=[
        RuntimeOffer(runtime="llamacpp", available=True, version="b4242", location="/opt/llama-server")])


def split_plan() -> Plan:
    """Too big for either box; across both it fits now: 20 layers on tower, 20 on laptop."""
    summary = GgufSummary(architecture="llama", file_size=40 * GiB, tensor_bytes=40 * GiB, tensor_count=400,
                          block_count=40)
    too_big = PlanOption(kind="cpu", label="CPU only", node=MAIN, state="too_big", ctx_size=0, max_ctx_size=0,
                         max_ctx_size_empty=0, message="needs 44.0 GiB, 24.0 GiB usable")
    shares = [NodeShare(node=MAIN, role="main", layers=20, device="cpu", needed_bytes=22 * GiB, free_bytes=24 * GiB,
                        capacity_bytes=30 * GiB),
              NodeShare(node=HELPER, role="helper", layers=20, device="cpu", needed_bytes=20 * GiB,
                        free_bytes=24 * GiB, capacity_bytes=30 * GiB)]
    across = PlanOption(kind="nodes", label="across 2 nodes over llama.cpp RPC", node=MAIN, state="free",
                        ctx_size=4096, max_ctx_size=4096, max_ctx_size_empty=16384, n_gpu_layers=20,
                        settings=LlamaCppSettings(ctx_size=4096, n_gpu_layers=20),
                        args=["--ctx-size", "4096", "--n-gpu-layers", "20"], rpc_nodes=[HELPER], shares=shares)
    return Plan(source=FILE, summary=summary, nodes=[NodePlan(node=MAIN, summary=summary, options=[too_big])],
                fleet=[across])


class SplitDaemon(FakeDaemonClient):
    def __init__(self) -> None:
        super().__init__()
        self.nodes += [box(MAIN, "tower"), box(HELPER, "laptop")]

    async def plan(self, query: PlanQuery) -> Plan:
        self._record("plan", query)
        return split_plan()


async def test_the_split_is_listed_picked_and_saved_with_its_helpers() -> None:
    fake = SplitDaemon()
    vm = AddModelViewModel(fake)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("path", FILE)
    await vm.check_plan()
    s = vm.state.value
    assert s.plan_rows[1].startswith("tower: across 2 nodes over llama.cpp RPC · across nodes · 4096 tokens of "
                                     "context (largest now 4096, empty 16384) · free now · layers: 20 on tower, "
                                     "20 on laptop · --ctx-size 4096 --n-gpu-layers 20")
    assert s.picked == 1 and s.node == MAIN and s.rpc_nodes == (HELPER,), "the one way it fits is picked"
    assert s.plan_note.startswith("Runs across nodes: tower runs it and laptop hold part of its layers")
    assert s.plan_note.endswith("its memory budget is the main node's part, 22.00 GiB.")
    await vm.add()
    saved = fake.called("create_model")[-1][0]
    assert (saved.node, saved.rpc_nodes, saved.settings.n_gpu_layers, saved.settings.ctx_size) == (
        MAIN, [HELPER], 20, 4096)
    assert saved.memory_budget_gib == 22.0, "the main node is held to its part, not to the whole model"
    vm.set_field("node", "laptop")  # a node typed by hand: no option, no helpers
    assert vm.state.value.rpc_nodes == ()
    vm.close()


def test_the_editor_shows_the_helpers_and_saves_them_as_typed() -> None:
    form = SettingsForm(definition("big", node=MAIN, rpc_nodes=[HELPER]))
    spec = next(s for s in form.specs if s.key == "rpc_nodes")
    assert (spec.label, spec.group, form.values["rpc_nodes"]) == ("Helper nodes", "Model", HELPER)
    form.set("rpc_nodes", f"{HELPER}, laptop-2")
    saved, errors = form.validate()
    assert errors == {} and saved is not None and saved.rpc_nodes == [HELPER, "laptop-2"]
    form.set("rpc_nodes", "")
    saved, _ = form.validate()
    assert saved is not None and saved.rpc_nodes == []
    vllm = SettingsForm(definition("folder", runtime="vllm", model_path="/models/folder"))
    assert all(s.key != "rpc_nodes" for s in vllm.specs), "llama.cpp only"


async def test_the_demo_reports_a_started_models_helpers() -> None:
    fake = FakeDaemonClient([definition("big", node=MAIN, rpc_nodes=[HELPER])])
    status = await fake.start_model("big")
    assert status.state == ModelState.STARTING and [(h.node, h.state) for h in status.rpc_helpers] == [
        (HELPER, "ready")]
    assert [h.state for h in (await fake.stop_model("big")).rpc_helpers] == ["stopped"]


@pytest.fixture
def window(open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext, SplitDaemon]:
    fake = SplitDaemon()
    win = open_main_window(fake)
    return win, win.ctx, fake


@pytest.mark.gui
def test_the_wizard_takes_the_split_clicked(window: tuple[MainWindow, AppContext, SplitDaemon], qtbot: Any) -> None:
    win, ctx, fake = window
    with add_model_dialog(ctx, win) as dialog:
        qtbot.waitUntil(lambda: bool(dialog.vm.state.value.nodes))
        dialog.source_buttons.button(1).click()  # a file on the node
        qtbot.keyClicks(dialog.path, FILE)
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_list.count() == 2)
        assert dialog.plan_list.currentRow() == 1 and dialog.node.text() == "tower"
        assert "layers: 20 on tower, 20 on laptop" in dialog.plan_list.item(1).text()
        assert dialog.plan_note.isVisible() and "laptop hold part of its layers" in dialog.plan_note.text()
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(fake.called("create_model")))
        saved = fake.called("create_model")[0][0]
        assert (saved.node, saved.rpc_nodes) == (MAIN, [HELPER])


@pytest.mark.gui
def test_the_model_panel_shows_a_split_models_helpers(open_main_window: Any, qtbot: Any) -> None:
    fake = FakeDaemonClient([definition("big", node=MAIN, rpc_nodes=[HELPER]), definition("alone")])
    fake.nodes += [box(MAIN, "tower"), box(HELPER, "laptop")]
    win = open_main_window(fake, nodes_loaded=True)
    fake.set_state("big", ModelState.READY, rpc_helpers=[RpcHelper(node=HELPER, state="ready")])
    win.open_model("big")
    helpers = win.models.panel.overview.values["helpers"]
    qtbot.waitUntil(lambda: helpers.text() == "laptop (ready)")
    assert helpers.isVisible()
    win.open_model("alone")  # a model on one node has no helpers row
    qtbot.waitUntil(lambda: not helpers.isVisible())
