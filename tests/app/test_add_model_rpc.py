"""One model across nodes in the app, over the real daemon and two real nodes too small for the model
alone (in-process agents, the fake llama-server and the fake ggml-rpc-server beside it): the
add-model wizard lists the daemon's split (each node's layers), picking it saves the model on the
main node with its helpers (``rpc_nodes``) and the main node's part as its memory budget, the model
editor shows and edits the helpers, and a started split model reports its helpers' state in its
status and in the model panel."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import add_model_dialog, definition
from PySide6.QtCore import Qt
from real_daemon import RealDaemon, gpu_node

from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.settings_form import SettingsForm
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition, ModelState
from tests.agent.test_rpc_peers import write_fake_rpc_server
from tests.fakes.gguf_files import write_gguf

BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}
CTX = 14336  # 7 GiB of KV cache: more than either node holds (7.0 GiB usable), within both together


class Pair:
    def __init__(self, daemon: RealDaemon, nodes: dict[str, str], file: Path) -> None:
        self.daemon, self.nodes, self.file = daemon, nodes, file

    def name_of(self, node_id: str) -> str:
        return next(name for name, found in self.nodes.items() if found == node_id)


@pytest.fixture(scope="module")
def pair(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """The daemon's two nodes, "tower" and "laptop": no GPU, 6 GiB of memory free each, rpc-server."""
    root = tmp_path_factory.mktemp("rpc")
    nodes = {}
    for name in ("tower", "laptop"):
        (root / f"runtime-{name}").mkdir()
        write_fake_rpc_server(root / f"runtime-{name}")  # beside its llama-server, where the catalog looks
        nodes[name] = gpu_node(real_daemon, root, name, [], memory_gib=(8, 6))
    return Pair(real_daemon, nodes, write_gguf(root / "models" / "big-Q4_K_M.gguf", **BIG))


async def split_wizard(client: DaemonClient, pair: Pair, model_id: str) -> AddModelViewModel:
    vm = AddModelViewModel(client)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("path", str(pair.file))
    vm.set_field("ctx_size", str(CTX))
    vm.set_field("model_id", model_id)
    await vm.check_plan()
    return vm


async def test_the_split_is_listed_picked_and_saved_with_its_helpers(pair: Pair, client: DaemonClient) -> None:
    vm = await split_wizard(client, pair, "big")
    s = vm.state.value
    assert s.picked is not None and s.rpc_nodes, "the one way it fits is picked"
    main, (helper,) = pair.name_of(s.node), [pair.name_of(n) for n in s.rpc_nodes]
    assert {main, helper} == {"tower", "laptop"}
    assert all("too big" in row for n, row in enumerate(s.plan_rows) if n != s.picked), "alone, neither holds it"
    row = s.plan_rows[s.picked]
    assert row.startswith(f"{main}: across 2 nodes over llama.cpp RPC")
    assert f" · across nodes · {CTX} tokens of context (largest now {CTX}, empty {CTX}) · free now · layers: " \
           f"14 on {main}, 18 on {helper} · --ctx-size {CTX} --n-gpu-layers 18" in row
    assert s.plan_note.startswith(f"Runs across nodes: {main} runs it and {helper} hold part of its layers")
    budget = s.main_share_gib
    assert budget is not None and s.plan_note.endswith(f"its memory budget is the main node's part, {budget:.2f} GiB.")
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    saved = (await client.get_model("big")).definition
    assert (saved.node, saved.rpc_nodes, saved.settings.n_gpu_layers, saved.settings.ctx_size) == (
        pair.nodes[main], [pair.nodes[helper]], 18, CTX)
    assert saved.memory_budget_gib == budget, "the main node is held to its part, not to the whole model"
    vm.set_field("node", helper)  # a node typed by hand: no option, no helpers
    assert vm.state.value.rpc_nodes == ()
    vm.close()


def test_the_editor_shows_the_helpers_and_saves_them_as_typed() -> None:
    main, helper = "a" * 64, "b" * 64
    form = SettingsForm(definition("big", node=main, rpc_nodes=[helper]))
    spec = next(s for s in form.specs if s.key == "rpc_nodes")
    assert (spec.label, spec.group, form.values["rpc_nodes"]) == ("Helper nodes", "Model", helper)
    form.set("rpc_nodes", f"{helper}, laptop-2")
    saved, errors = form.validate()
    assert errors == {} and saved is not None and saved.rpc_nodes == [helper, "laptop-2"]
    form.set("rpc_nodes", "")
    saved, _ = form.validate()
    assert saved is not None and saved.rpc_nodes == []
    vllm = SettingsForm(definition("folder", runtime="vllm", model_path="/models/folder"))
    assert all(s.key != "rpc_nodes" for s in vllm.specs), "llama.cpp only"


async def split_model(client: DaemonClient, pair: Pair, model_id: str) -> ModelDefinition:
    """A model saved by the wizard with the split it picked."""
    vm = await split_wizard(client, pair, model_id)
    await vm.add()
    vm.close()
    assert vm.state.value.error is None, vm.state.value.error
    return (await client.get_model(model_id)).definition


async def test_a_started_split_model_reports_its_helpers(pair: Pair, client: DaemonClient) -> None:
    model = await split_model(client, pair, "big-started")
    status = await client.start_model(model.id, wait=True)
    try:
        assert status.state == ModelState.READY, status.error
        assert [(h.node, h.state) for h in status.rpc_helpers] == [(model.rpc_nodes[0], "ready")]
    finally:
        stopped = await client.stop_model(model.id)
    assert [h.state for h in stopped.rpc_helpers] == ["stopped"]


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(pair: Pair, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*pair.daemon, client_name="app"), nodes_loaded=True)


@pytest.mark.gui
def test_the_wizard_takes_the_split_clicked(window: MainWindow, pair: Pair, qtbot: Any) -> None:
    win = window
    with add_model_dialog(win.ctx, win) as dialog:
        qtbot.waitUntil(lambda: len(dialog.vm.state.value.nodes) == 2)
        dialog.source_buttons.button(1).click()  # a file on the node
        qtbot.keyClicks(dialog.path, str(pair.file))
        qtbot.keyClicks(dialog.ctx_size, str(CTX))
        qtbot.keyClicks(dialog.model_id, "big-clicked")
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_list.count() == 3, timeout=10_000)
        s = dialog.vm.state.value
        main, helper = pair.name_of(s.node), pair.name_of(s.rpc_nodes[0])
        assert dialog.plan_list.currentRow() == s.picked and dialog.node.text() == main
        assert f"layers: 14 on {main}, 18 on {helper}" in dialog.plan_list.item(s.picked or 0).text()
        assert dialog.plan_note.isVisible() and f"{helper} hold part of its layers" in dialog.plan_note.text()
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.vm.state.value.done_ids == ("big-clicked",), timeout=10_000)
        saved = pair.daemon.call(lambda deps: deps.registry.require("big-clicked"))
        assert (saved.node, saved.rpc_nodes) == (pair.nodes[main], [pair.nodes[helper]])


@pytest.mark.gui
def test_the_model_panel_shows_a_split_models_helpers(window: MainWindow, pair: Pair, qtbot: Any) -> None:
    client = window.ctx.client
    made = asyncio.ensure_future(split_model(client, pair, "big-shown"))
    qtbot.waitUntil(made.done, timeout=10_000)
    model = made.result()
    alone = asyncio.ensure_future(client.create_model(definition("alone", node=model.node,
                                                                 model_path=str(pair.file))))
    qtbot.waitUntil(alone.done, timeout=10_000)
    started = asyncio.ensure_future(client.start_model(model.id, wait=True))
    qtbot.waitUntil(started.done, timeout=30_000)
    try:
        assert started.result().state == ModelState.READY
        window.open_model(model.id)
        helpers = window.models.panel.overview.values["helpers"]
        qtbot.waitUntil(lambda: helpers.text() == f"{pair.name_of(model.rpc_nodes[0])} (ready)", timeout=10_000)
        assert helpers.isVisible()
        window.open_model("alone")  # a model on one node has no helpers row
        qtbot.waitUntil(lambda: not helpers.isVisible())
    finally:
        stopped = asyncio.ensure_future(client.stop_model(model.id))
        qtbot.waitUntil(stopped.done, timeout=30_000)
