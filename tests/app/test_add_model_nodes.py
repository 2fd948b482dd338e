"""The add-model wizard on a daemon without a local agent: it places the model on a node the daemon
has (not on a "local" it would refuse), shows that node in its Node field, and a node typed by name
reaches the daemon as the node's id (its fit, download and import calls take ids)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from real_daemon import RealDaemon, gpu_node

from agent.api.models import GpuInfo
from app.ui.main_window import MainWindow
from app.viewmodels.add_model import AddModelViewModel
from daemon.api.client import DaemonClient
from tests.fakes.gguf_files import write_gguf

RTX = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", memory_total=24 << 30, memory_used=1 << 30)


@pytest.fixture(scope="module")
def tower(real_daemon: RealDaemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The daemon's one node, "tower" (a real agent, one GPU), and a GGUF file it can read."""
    root = tmp_path_factory.mktemp("tower")
    yield gpu_node(real_daemon, root, "tower", [RTX]), write_gguf(root / "models" / "tiny-Q4_K_M.gguf")


@pytest.fixture
async def vm(real_daemon: RealDaemon) -> AsyncIterator[AddModelViewModel]:
    client = DaemonClient(*real_daemon, client_name="app")
    wizard = AddModelViewModel(client)
    try:
        yield wizard
    finally:
        wizard.close()
        await client.close()


async def test_the_wizard_places_the_model_on_a_node_the_daemon_has(
        vm: AddModelViewModel, tower: tuple[str, Path], real_daemon: RealDaemon) -> None:
    node_id, gguf = tower
    await vm.load_nodes()
    assert vm.state.value.node == "tower", "not 'local': this daemon runs no local agent"
    vm.set_source("file")
    vm.set_field("path", str(gguf))
    assert await vm.check_fit() is not None, vm.state.value.error
    assert vm.state.value.fit_text.startswith("Fits")
    vm.set_field("model_id", "tiny")
    await vm.add()
    assert vm.state.value.error is None and vm.state.value.done_ids == ("tiny",)
    assert (await vm.client.get_model("tiny")).definition.node == node_id


async def test_a_node_typed_by_name_reaches_the_daemon_as_its_id(vm: AddModelViewModel,
                                                                tower: tuple[str, Path]) -> None:
    node_id, gguf = tower
    await vm.load_nodes()
    vm.set_source("file")
    vm.set_field("node", "tower")
    vm.set_field("path", str(gguf))
    assert vm.state.value.node_id == node_id
    assert await vm.check_fit() is not None and vm.state.value.error is None, vm.state.value.error
    vm.set_field("node", "elsewhere")
    assert await vm.check_fit() is None
    assert vm.state.value.error == "no node 'elsewhere'", "a node the daemon lacks: its own words"


@pytest.mark.gui
def test_the_dialog_shows_the_node_it_places_on(real_daemon: RealDaemon, tower: tuple[str, Path],
                                                open_main_window: Callable[..., MainWindow], qtbot: Any) -> None:
    win = open_main_window(DaemonClient(*real_daemon, client_name="app"))
    dialog = win.open_add_model()
    qtbot.waitUntil(lambda: dialog.node.text() == "tower")
    assert "NVIDIA" not in dialog.node.text() and dialog.node_runtimes.isVisible()
    dialog.reject()
