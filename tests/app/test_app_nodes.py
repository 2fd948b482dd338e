"""The Nodes page: its view-models on their own, then the widgets offscreen over the fake daemon."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from helpers import until
from PySide6.QtWidgets import QComboBox, QLabel

from agent.api.models import GpuInfo
from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import SETTINGS
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.nodes import NodesViewModel, node_choices
from app.viewmodels.pairing import PairingWizard, WizardStep
from daemon.api.nodes import NodeState, NodeView


# --- view-models ----------------------------------------------------------------------------------
async def test_the_nodes_view_model_follows_node_events(fake: FakeDaemonClient) -> None:
    fleet = FleetViewModel(fake, host_refresh_s=3600, poll_timeout=1)
    vm = NodesViewModel(fake, fleet, refresh_s=3600)
    fleet.start()
    try:
        await until(lambda: vm.state.value.loaded, what="the first node list")
        assert [n.id for n in vm.state.value.nodes] == ["local"] and vm.state.value.selected_id == "local"
        fake.add_waiting_agent("gpu-box", "ABCD-EFGH")
        await until(lambda: len(vm.state.value.discovered) == 1, what="the discovered agent")
        assert vm.state.value.discovered[0].name == "gpu-box"
        assert vm.name_of("local") == "this machine"
    finally:
        await fleet.stop()
        vm.close()


def test_the_node_picker_says_how_much_memory_each_node_has_free() -> None:
    local = NodeView(id="local", name="ws", local=True, state=NodeState.ONLINE, memory_available=20 * 2**30)
    box = NodeView(id="b" * 64, name="gpu-box", state=NodeState.OFFLINE, memory_available=48 * 2**30)
    assert node_choices((local, box)) == [("local", "This machine — 20.0 GiB free"),
                                          ("b" * 64, "gpu-box — 48.0 GiB free · offline")]
    assert node_choices((), "local") == [], "no 'local' where the daemon runs no local agent"
    assert node_choices((box,), "local") == [("b" * 64, "gpu-box — 48.0 GiB free · offline")]
    assert node_choices((local,), "c" * 64)[-1] == ("c" * 64, "cccccccccccc… — not paired")


async def test_the_wizard_checks_the_code_and_reports_wrong_ones(fake: FakeDaemonClient) -> None:
    entry = fake.add_waiting_agent("gpu-box", "ABCD-EFGH")
    wizard = PairingWizard(fake)
    await wizard.look_up("10.9.9.9:9443")
    assert wizard.state.value.step == WizardStep.CHOOSE and "No MirbadLLM agent" in (wizard.state.value.error or "")
    await wizard.look_up(entry.address)
    assert wizard.state.value.step == WizardStep.CONFIRM and wizard.state.value.candidate == entry
    assert await wizard.pair("ABC") is None and "not a pairing code" in (wizard.state.value.error or "")
    assert fake.called("pair_node") == []  # nothing sent for a malformed code
    assert await wizard.pair("ABCD-EFGK") is None and "Wrong pairing code" in (wizard.state.value.error or "")
    node = await wizard.pair("abcd efgh")
    assert node is not None and wizard.state.value.step == WizardStep.DONE
    assert fake.called("pair_node")[-1] == (entry.address, entry.fingerprint)


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(fake: FakeDaemonClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(fake, nodes_loaded=True)


def _text(widget: Any) -> str:
    return "\n".join(w.text() for w in widget.findChildren(QLabel))


@pytest.mark.gui
def test_pair_a_discovered_node_see_its_gpus_and_remove_it(window: MainWindow, fake: FakeDaemonClient,
                                                           qtbot: Any) -> None:
    window.show_page("nodes")
    page = window.nodes
    assert page.list.count() == 1 and page.panel.title.text() == "This machine"
    assert not page.panel.remove_button.isVisible()
    entry = fake.add_waiting_agent("gpu-box", "ABCD-EFGH")
    qtbot.waitUntil(lambda: page.waiting.isVisible() and "gpu-box" in _text(page.waiting))
    assert entry.short_fingerprint in _text(page.waiting)

    dialog = page.open_pairing(entry)
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1)
    assert dialog.fingerprint.text() == entry.short_fingerprint  # what the user compares
    dialog.code.setText("ABCD-EFGK")
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: "Wrong pairing code" in dialog.error.text())
    dialog.code.setText("abcd-efgh")
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 2)
    assert "“gpu-box” is paired" in dialog.done_text.text() and dialog.code.text() == ""
    dialog.accept()
    qtbot.waitUntil(lambda: page.list.count() == 2 and page.panel.title.text() == "gpu-box")
    assert not page.waiting.isVisible()
    assert page.panel.gpus.rowCount() == 1 and page.panel.gpus.item(0, 1).text() == "GPU-remote-0"
    assert page.panel.values["memory"].text() == "48.0 GiB free of 64.0 GiB"
    assert page.panel.badge.text() == "Online"
    assert not window.grab().isNull()

    asked: list[str] = []
    page.confirm = lambda _parent, text: asked.append(text) or True  # type: ignore[func-returns-value]
    page.panel.remove_button.click()
    qtbot.waitUntil(lambda: page.list.count() == 1)
    assert "shows a new pairing code" in asked[0] and fake.called("remove_node")


@pytest.mark.gui
def test_the_model_editor_places_a_model_on_a_paired_node(window: MainWindow, fake: FakeDaemonClient,
                                                          qtbot: Any) -> None:
    entry = fake.add_waiting_agent("gpu-box", "ABCD-EFGH")
    task = asyncio.ensure_future(fake.pair_node(entry.address, "ABCD-EFGH", entry.fingerprint))
    qtbot.waitUntil(task.done)
    paired = task.result()
    window.show_page("models")
    editor = window.models.panel.settings
    window.models.panel.tabs.setCurrentIndex(SETTINGS)
    picker = editor.editors["node"]
    assert isinstance(picker, QComboBox)
    qtbot.waitUntil(lambda: picker.count() == 2)
    labels = [picker.itemText(i) for i in range(picker.count())]
    assert labels == ["This machine — 20.0 GiB free", "gpu-box — 48.0 GiB free · GPU 40.0 GiB free"]
    picker.setCurrentIndex(1)
    editor.save()
    qtbot.waitUntil(lambda: bool(fake.called("update_model")))
    assert fake.called("update_model")[-1][0].node == paired.id


@pytest.mark.gui
def test_a_node_without_a_gpu_says_so_in_its_gpu_charts(window: MainWindow, fake: FakeDaemonClient,
                                                         qtbot: Any) -> None:
    window.show_page("nodes")
    panel = window.nodes.panel
    charts = {chart.title: chart for chart in panel.charts}
    assert panel.title.text() == "This machine" and not panel.node.gpus
    qtbot.waitUntil(lambda: charts["GPU memory"].message == "No GPU on this node")
    assert charts["GPU utilisation"].message == "No GPU on this node" and charts["CPU"].message is None
    panel.show_node(panel.node.model_copy(update={"gpus": [GpuInfo(index=0, name="RTX", memory_total=1)]}))
    assert charts["GPU memory"].message is None and charts["GPU utilisation"].message is None
