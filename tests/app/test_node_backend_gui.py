"""The Nodes page says what a node's llama.cpp computes on (backend, device, why not a better one) and
lets the user choose it: auto, CUDA, Vulkan or the CPU; a choice the node cannot take is refused with
the daemon's reason and the box goes back; the mouse wheel never changes it in passing. The real
daemon with a real agent whose llama.cpp build is the fake one with a fake Vulkan module listing a
Radeon (``tests/fakes.write_fake_build``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import definition

from agent.api.backends import Backend, BackendState, Device
from app.context import AppContext, Message
from app.ui.main_window import MainWindow
from app.viewmodels.nodes import backend_summary
from daemon.api.client import DaemonClient
from daemon.api.nodes import NodeState, NodeView, RuntimeOffer
from tests.fakes import write_fake_build

BOX = "c" * 64
RADEON = Device(name="Vulkan0", description="AMD Radeon RX 7600 (RADV NAVI33)", memory_total_mib=8176,
                memory_free_mib=8000)


def radeon_box() -> NodeView:
    offer = RuntimeOffer(runtime="llamacpp", available=True, version="11434.0.0 (runtime.json)", backends=[
        BackendState(backend=Backend.CPU, available=True, verified=True),
        BackendState(backend=Backend.VULKAN, available=True, verified=True, devices=[RADEON])])
    return NodeView(id=BOX, name="radeon-box", state=NodeState.ONLINE, address="10.0.0.7:9443", runtimes=[offer],
                    backend=Backend.VULKAN)


def test_the_summary_says_backend_device_and_why_not_better() -> None:
    node = radeon_box()
    assert backend_summary(node) == "Computes on Vulkan — Vulkan0 · AMD Radeon RX 7600 (RADV NAVI33) · 8.0 GiB"
    fallen = node.model_copy(update={"backend": Backend.CPU, "backend_choice": "vulkan",
                                     "backend_why": "Vulkan: it loaded with Vulkan but offloaded no layers"})
    assert backend_summary(fallen) == "Computes on CPU\nNot Vulkan: it loaded with Vulkan but offloaded no layers"
    assert backend_summary(node.model_copy(update={"runtimes": [], "backend": None})) == "Not reported yet"


@pytest.fixture(scope="module")
def box(real_daemon: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The id of "radeon-box": a real agent whose build lists the Radeon through its Vulkan module."""
    module = {"devices": [[RADEON.name, RADEON.description, RADEON.memory_total_mib, RADEON.memory_free_mib]]}
    build = write_fake_build(tmp_path_factory.mktemp("radeon-runtimes"), {"vulkan": module})
    return real_daemon.add_node("radeon-box", llama_server=Path(build) / "bin" / "llama-server")  # type: ignore[no-any-return]


def _choice(real_daemon: Any, node_id: str, choice: str | None = None) -> str:
    """The daemon's backend choice for the node (set to ``choice`` first when given)."""

    async def ask(_deps: Any) -> str:
        client = DaemonClient(*real_daemon)
        try:
            if choice is not None:
                await client.set_node_backend(node_id, choice)
            return str((await client.get_node(node_id)).backend_choice)
        finally:
            await client.close()

    return real_daemon.call(ask)  # type: ignore[no-any-return]


@pytest.fixture
def window(real_daemon: Any, box: str, open_main_window: Callable[..., MainWindow]) -> tuple[MainWindow, AppContext]:
    assert _choice(real_daemon, box, "auto") == "auto"  # each test starts from the node's default
    win = open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True, size=(1280, 800))
    return win, win.ctx


@pytest.mark.gui
def test_choosing_the_backend_from_the_nodes_page(window: tuple[MainWindow, AppContext], real_daemon: Any, box: str,
                                                  qtbot: Any) -> None:
    win, ctx = window
    messages: list[Message] = []
    ctx.messages.subscribe(messages.append)
    win.show_page("nodes")
    panel = win.nodes.panel
    ctx.nodes.select(box)
    qtbot.waitUntil(lambda: panel.title.text() == "radeon-box")
    combo, note = panel.backend_choice, panel.backend_note
    qtbot.waitUntil(lambda: note.text().startswith("Computes on Vulkan"))
    assert combo.currentData() == "auto" and combo.isVisible()
    assert note.text().startswith("Computes on Vulkan — Vulkan0 · AMD Radeon RX 7600")

    combo.setCurrentIndex(combo.findData("cpu"))
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: note.text() == "Computes on CPU")
    assert _choice(real_daemon, box) == "cpu" and combo.currentData() == "cpu"
    assert messages[-1] == Message("radeon-box: models started from now on use CPU only")

    combo.setCurrentIndex(combo.findData("cuda"))  # no NVIDIA there: refused, and the box goes back
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: len(messages) == 2)
    assert messages[-1].error and "cannot compute on cuda: its build has no cuda backend" in messages[-1].text
    assert "Vulkan: Vulkan0 AMD Radeon RX 7600 (RADV NAVI33) (8176 MiB)" in messages[-1].text
    assert combo.currentData() == "cpu" and ctx.nodes.state.value.node(box).backend_choice == "cpu"
    assert _choice(real_daemon, box) == "cpu"


@pytest.mark.gui
def test_the_wheel_does_not_change_the_backend_in_passing(window: tuple[MainWindow, AppContext], real_daemon: Any,
                                                          box: str, qtbot: Any) -> None:
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    win, ctx = window
    win.show_page("nodes")
    ctx.nodes.select(box)
    panel = win.nodes.panel
    qtbot.waitUntil(lambda: panel.title.text() == "radeon-box")
    combo = panel.backend_choice
    assert not combo.hasFocus()
    centre = QPointF(combo.rect().center())
    wheel = QWheelEvent(centre, QPointF(combo.mapToGlobal(combo.rect().center())), QPoint(0, 0), QPoint(0, -120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(combo, wheel)
    assert combo.currentData() == "auto" and _choice(real_daemon, box) == "auto"


@pytest.mark.gui
def test_the_model_panel_says_where_a_running_model_computes(qtbot: Any, real_daemon: Any) -> None:
    from app.ui.pages.model_panel import OverviewTab
    from app.viewmodels.fleet import FleetViewModel
    from app.viewmodels.models_page import ModelsPageViewModel
    from daemon.api.contracts import Offload
    from daemon.api.models import ModelState, ModelStatus, ModelView

    # The tab's rendering of a model's status (a hand-built one: a model on a Vulkan GPU needs one).
    tab = OverviewTab(ModelsPageViewModel(FleetViewModel(DaemonClient(*real_daemon, client_name="app"))))
    qtbot.addWidget(tab)
    tab.show()
    running = ModelStatus(id="alpha", served_name="alpha", state=ModelState.READY, backend="vulkan",
                          offload=Offload(layers_on_gpu=19, layers_total=19, model_mib={"Vulkan0": 65.2,
                                                                                        "CPU_Mapped": 170.0}))
    tab.show_state(ModelView(definition=definition("alpha"), status=running))
    shown = tab.values["compute"]
    assert shown.text() == "Vulkan · Vulkan0 · 19/19 layers on the GPU" and shown.isVisible()
    on_cpu = running.model_copy(update={"backend": "cpu", "offload": Offload(layers_on_gpu=0, layers_total=19)})
    tab.show_state(ModelView(definition=definition("alpha"), status=on_cpu))
    assert shown.text() == "CPU"
    stopped = running.model_copy(update={"state": ModelState.STOPPED, "backend": None, "offload": None})
    tab.show_state(ModelView(definition=definition("alpha"), status=stopped))
    assert not shown.isVisible()  # not running (or not llama.cpp): nothing to say
