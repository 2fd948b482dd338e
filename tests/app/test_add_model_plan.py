"""The add-model wizard's "how it runs here" over the real daemon: the plan of its nodes (real agents
whose GPU probes report made-up GPUs, the fake llama-server) listed option by option, the picked
option's node and llama.cpp settings saved with the model, and a plan that fails shown without
blocking the add."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import add_model_dialog, until
from PySide6.QtCore import Qt
from real_daemon import WORKSTATION, RealDaemon, daemon_in_thread, gpu_node

from agent.api.models import GpuInfo
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from daemon.api.client import DaemonClient
from tests.fakes.gguf_files import write_gguf

GiB = 1 << 30
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}  # GiBs of KV cache
RTX = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", memory_total=24 * GiB, memory_used=GiB)


class Tower:
    def __init__(self, daemon: RealDaemon, node: str, file: Path) -> None:
        self.daemon, self.node, self.file = daemon, node, file


@pytest.fixture(scope="module")
def tower(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Tower:
    """The daemon's one node, "tower" (an RTX 4090 with 23 GiB free, 48 GiB of memory free), and a
    GGUF whose KV cache needs 16 GiB at its 32768 tokens."""
    root = tmp_path_factory.mktemp("plan")
    return Tower(real_daemon, gpu_node(real_daemon, root, "tower", [RTX]),
                 write_gguf(root / "models" / "big-Q4_K_M.gguf", **BIG))


async def wizard(client: DaemonClient, path: Path | str, model_id: str) -> AddModelViewModel:
    vm = AddModelViewModel(client)
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("path", str(path))
    vm.set_field("model_id", model_id)
    return vm


async def saved(client: DaemonClient, model_id: str) -> Any:
    return (await client.get_model(model_id)).definition


async def test_each_option_is_listed_and_the_best_is_picked(tower: Tower, client: DaemonClient) -> None:
    vm = await wizard(client, tower.file, "big")
    assert vm.state.value.can_plan
    plan = await vm.check_plan()
    assert plan is not None and plan.source == str(tower.file)
    s = vm.state.value
    gpu, cpu = s.plan_rows
    assert gpu.startswith("tower: GPU 0 (NVIDIA GeForce RTX 4090) · GPU · 32768 tokens of context "
                          "(largest now 32768, empty 32768) · free now · --device CUDA0 --n-gpu-layers 33")
    assert cpu.startswith("tower: CPU only · CPU · 32768 tokens of context") and "--device none" in cpu
    assert s.picked == 0 and s.picked_option is not None and s.picked_option.kind == "gpu"
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    model = await saved(client, "big")
    assert (model.node, model.settings.gpus, model.settings.n_gpu_layers, model.settings.ctx_size) == (
        tower.node, [0], 33, 32768)
    vm.close()


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[tuple[RealDaemon, dict[str, str], Path]]:
    """A daemon of three nodes: "tower" (its RTX 4090 nearly full, 8 GiB of memory), "gpu-box" (two
    8 GiB GPUs, 8 GiB of memory) and "laptop", offline; the nodes' ids by name, and the GGUF."""
    with daemon_in_thread(tmp_path / "home", probe_interval_s=0.5) as daemon:  # the laptop offline in 1.5 s
        busy = RTX.model_copy(update={"memory_used": 20 * GiB})
        small = [GpuInfo(index=i, name="NVIDIA RTX A4000", memory_total=8 * GiB, memory_used=GiB // 2) for i in (0, 1)]
        nodes = {"tower": gpu_node(daemon, tmp_path, "tower", [busy], memory_gib=(8, 4)),
                 "gpu-box": gpu_node(daemon, tmp_path, "gpu-box", small, memory_gib=(8, 4)),
                 "laptop": gpu_node(daemon, tmp_path, "laptop", [])}
        daemon.call(lambda _deps: daemon.agents[-1].close())  # the laptop goes away

        async def offline(deps: Any) -> None:
            await until(lambda: not deps.links.get(nodes["laptop"]).online, timeout=30, what="the laptop offline")

        daemon.call(offline)
        yield daemon, nodes, write_gguf(tmp_path / "models" / "big-Q4_K_M.gguf", **BIG)


async def test_the_option_picked_gives_the_model_its_node_and_gpu_settings(
        three_nodes: tuple[RealDaemon, dict[str, str], Path]) -> None:
    daemon, nodes, file = three_nodes
    client = DaemonClient(*daemon, client_name="app")
    vm = await wizard(client, file, "big")
    vm.set_field("ctx_size", "16384")
    await vm.check_plan()
    s = vm.state.value
    rows = {row.split(" · ", 2)[0]: row for row in s.plan_rows}
    assert all("16384 tokens of context" in row for row in s.plan_rows if not row.startswith("Across"))
    assert "needs room" in rows["tower: GPU 0 (NVIDIA GeForce RTX 4090)"]
    assert "too big" in rows["tower: CPU only"] and "cpu needs 8.1 GiB of 7.0 GiB" in rows["tower: CPU only"]
    split = rows["gpu-box: GPUs 0,1 split by layers (1,1)"]
    assert split.startswith("gpu-box: GPUs 0,1 split by layers (1,1) · split across GPUs · 16384 tokens")
    assert "free now" in split and "too big" in rows["gpu-box: GPU 0 (NVIDIA RTX A4000)"]
    across = next(row for row in s.plan_rows if row.startswith("Across nodes: "))
    assert "not available yet" in across
    assert s.plan_rows[s.picked or 0] == split and s.node == nodes["gpu-box"], "the best is the one free now"
    assert "laptop could not say: offline: " in s.plan_note
    with pytest.raises(ValueError, match="too big"):
        vm.pick_option(s.plan_rows.index(rows["tower: CPU only"]))
    with pytest.raises(ValueError, match="not available yet"):
        vm.pick_option(s.plan_rows.index(across))
    await vm.add()
    model = await saved(client, "big")
    assert model.node == nodes["gpu-box"]
    assert (model.settings.gpus, model.settings.split_mode, model.settings.tensor_split, model.settings.n_gpu_layers) \
        == ([0, 1], "layer", "1,1", 33)
    assert model.settings.ctx_size == 16384, "the context typed is kept"

    vm.pick_option(s.plan_rows.index(rows["tower: GPU 0 (NVIDIA GeForce RTX 4090)"]))  # once room is made
    assert vm.state.value.node == nodes["tower"]
    vm.set_field("model_id", "big-tower")
    await vm.add()
    model = await saved(client, "big-tower")
    assert (model.node, model.settings.gpus, model.settings.n_gpu_layers, model.settings.split_mode) == (
        nodes["tower"], [0], 33, None)
    vm.close()
    await client.close()


async def test_a_new_question_drops_the_old_plan_and_a_node_typed_drops_the_pick(tower: Tower,
                                                                                  client: DaemonClient) -> None:
    vm = await wizard(client, tower.file, "big-as-typed")
    await vm.check_plan()
    vm.set_field("node", "tower")
    assert vm.state.value.picked is None and vm.state.value.plan is not None
    await vm.add()
    assert (await saved(client, "big-as-typed")).settings.gpus is None, "no option picked: the settings as typed"
    vm.set_field("path", "/models/other.gguf")
    assert vm.state.value.plan is None and vm.state.value.plan_rows == ()
    vm.set_field("path", "/models/folder")
    assert not vm.state.value.can_plan, "the plan reads a GGUF header"
    vm.close()


@pytest.fixture
def stranded(tmp_path: Path) -> Iterator[RealDaemon]:
    """A daemon whose one node, "workstation", is paired but never online: no node can plan."""
    with daemon_in_thread(tmp_path / "home") as daemon:
        daemon.hold_models()
        yield daemon


async def test_a_failing_plan_is_shown_and_the_model_can_still_be_added(stranded: RealDaemon) -> None:
    client = DaemonClient(*stranded, client_name="app")
    vm = await wizard(client, "/models/big-Q4_K_M.gguf", "later")
    assert vm.state.value.node == "workstation"
    vm.set_field("ctx_size", "4096")
    assert await vm.check_plan() is None
    s = vm.state.value
    assert s.plan_error == "no node is online to plan on" and not s.planning and s.plan_rows == ()
    assert s.plan_note.startswith("No plan: no node is online to plan on") and "still add" in s.plan_note
    assert s.can_add and s.error is None
    await vm.add()
    assert vm.state.value.error is None, vm.state.value.error
    model = await saved(client, "later")
    assert (model.node, model.settings.ctx_size, model.settings.gpus) == (WORKSTATION, 4096, None)
    vm.close()
    await client.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(tower: Tower, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*tower.daemon, client_name="app"))


@pytest.mark.gui
def test_the_wizard_lists_the_plan_and_saves_the_option_clicked(window: MainWindow, tower: Tower,
                                                                qtbot: Any) -> None:
    win = window
    with add_model_dialog(win.ctx, win) as dialog:
        qtbot.waitUntil(lambda: bool(dialog.vm.state.value.nodes))
        assert dialog.plan_button.isVisible() and not dialog.plan_button.isEnabled(), "no Hugging Face file named"
        dialog.source_buttons.button(1).click()  # a file on the node
        assert dialog.plan_button.isVisible() and not dialog.plan_button.isEnabled()
        qtbot.keyClicks(dialog.path, str(tower.file))
        qtbot.keyClicks(dialog.model_id, "big-on-cpu")
        assert dialog.plan_button.isEnabled() and not dialog.plan_list.isVisible()
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_list.count() == 2, timeout=10_000)
        assert dialog.plan_list.isVisible() and dialog.plan_list.currentRow() == 0
        assert dialog.node.text() == "tower", "the Node field shows where the option picked runs"
        assert dialog.plan_list.item(0).text().startswith("tower: GPU 0 (NVIDIA GeForce RTX 4090) · GPU")
        assert "free now" in dialog.plan_list.item(1).text()
        dialog.plan_list.setCurrentRow(1)  # the CPU
        assert dialog.vm.state.value.picked == 1
        qtbot.mouseClick(dialog.add_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.vm.state.value.done_ids == ("big-on-cpu",), timeout=10_000)
        model = tower.daemon.call(lambda deps: deps.registry.require("big-on-cpu"))
        assert (model.node, model.settings.gpus, model.settings.n_gpu_layers, model.settings.ctx_size) == (
            tower.node, [], 0, 32768)


@pytest.mark.gui
def test_the_wizard_says_why_there_is_no_plan(stranded: RealDaemon, open_main_window: Callable[..., MainWindow],
                                              qtbot: Any) -> None:
    win = open_main_window(DaemonClient(*stranded, client_name="app"))
    with add_model_dialog(win.ctx, win) as dialog:
        qtbot.waitUntil(lambda: dialog.node.text() == "workstation")
        dialog.source_buttons.button(1).click()
        qtbot.keyClicks(dialog.path, "/models/big-Q4_K_M.gguf")
        qtbot.mouseClick(dialog.plan_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: dialog.plan_note.isVisible(), timeout=10_000)
        assert dialog.plan_note.text().startswith("No plan: no node is online to plan on")
        assert dialog.plan_note.property("role") == "error" and not dialog.plan_list.isVisible()
        assert dialog.add_button.isEnabled() and dialog.plan_button.isEnabled()
