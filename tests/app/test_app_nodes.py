"""The Nodes page: its view-models on their own, then the widgets offscreen, over the real daemon with
its local agent ("this machine": the fake llama-server) and real agents waiting to be paired on
loopback (``RealDaemon.add_node(paired=False)``), looked up by address as a user types one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import definition, until
from PySide6.QtWidgets import QComboBox, QLabel
from real_daemon import RealDaemon, daemon_in_thread

from agent.api.models import GpuInfo
from agent.api.pairing import CODE_ALPHABET
from app import format as fmt
from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import SETTINGS
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.nodes import NodesViewModel, node_choices
from app.viewmodels.pairing import PairingWizard, WizardStep
from daemon.api.client import DaemonClient
from daemon.api.nodes import DiscoveredNode, NodeState, NodeView
from daemon.deps import DaemonDeps
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes

GIB = 1 << 30
REMOTE_GPU = GpuInfo(index=0, name="RTX A6000", uuid="GPU-remote-0", memory_total=64 * GIB, memory_used=24 * GIB)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """A real daemon with its local agent (the fake llama-server)."""
    root = tmp_path_factory.mktemp("nodes")
    with daemon_in_thread(root / "home", write_fake_runtime(root / "runtime")) as found:
        yield found


@pytest.fixture
def client(daemon: RealDaemon) -> Iterator[DaemonClient]:
    """The app's client; the daemon back to this machine alone (no paired node, none waiting), no model."""

    async def alone(deps: DaemonDeps) -> None:
        admin = DaemonClient(*daemon)
        try:
            for node in await admin.list_nodes():
                if not node.local:
                    await admin.remove_node(node.id)
        finally:
            await admin.close()
        for fingerprint in list(deps.nodes.discovery.entries):
            deps.nodes.discovery.drop(fingerprint)  # gone from the LAN
        for held in deps.registry.all():
            await deps.registry.remove(held.id)

    daemon.call(alone)
    yield DaemonClient(*daemon, client_name="app")


def waiting_agent(daemon: RealDaemon, name: str, gpus: list[GpuInfo] | None = None) -> tuple[str, str]:
    """(address, pairing code) of a new real agent waiting to be paired (its code as its console shows it)."""
    address = daemon.add_node(name, gpus, paired=False)
    agent = daemon.agents[-1]
    return address, agent.last("pairing")["code"]


def looked_up(daemon: RealDaemon, address: str) -> DiscoveredNode:
    """The agent at ``address`` as the daemon lists it once a user typed its address (as mDNS would find it)."""

    async def add(_deps: DaemonDeps) -> DiscoveredNode:
        admin = DaemonClient(*daemon)
        try:
            found = (await admin.add_node_address(address)).discovered
        finally:
            await admin.close()
        assert found is not None
        return found

    return daemon.call(add)


def wrong(code: str) -> str:
    """A well-formed pairing code that is not ``code``."""
    last = code[-1]
    return code[:-1] + next(c for c in CODE_ALPHABET if c != last)


# --- view-models ----------------------------------------------------------------------------------
async def test_the_nodes_view_model_follows_node_events(daemon: RealDaemon, client: DaemonClient) -> None:
    fleet = FleetViewModel(client, host_refresh_s=3600, poll_timeout=1)
    vm = NodesViewModel(client, fleet, refresh_s=3600)
    fleet.start()
    try:
        await until(lambda: vm.state.value.loaded, what="the first node list")
        assert [n.id for n in vm.state.value.nodes] == ["local"] and vm.state.value.selected_id == "local"
        address, _code = waiting_agent(daemon, "waiting-box")
        looked_up(daemon, address)
        await until(lambda: len(vm.state.value.discovered) == 1, timeout=10, what="the discovered agent")
        assert vm.state.value.discovered[0].name == "waiting-box" and vm.state.value.discovered[0].address == address
        assert vm.name_of("local") == "this machine"
    finally:
        await fleet.stop()
        vm.close()
        await client.close()


def test_the_node_picker_says_how_much_memory_each_node_has_free() -> None:
    local = NodeView(id="local", name="ws", local=True, state=NodeState.ONLINE, memory_available=20 * 2**30)
    box = NodeView(id="b" * 64, name="gpu-box", state=NodeState.OFFLINE, memory_available=48 * 2**30)
    assert node_choices((local, box)) == [("local", "This machine — 20.0 GiB free"),
                                          ("b" * 64, "gpu-box — 48.0 GiB free · offline")]
    assert node_choices((), "local") == [], "no 'local' where the daemon runs no local agent"
    assert node_choices((box,), "local") == [("b" * 64, "gpu-box — 48.0 GiB free · offline")]
    assert node_choices((local,), "c" * 64)[-1] == ("c" * 64, "cccccccccccc… — not paired")


async def test_the_wizard_checks_the_code_and_reports_wrong_ones(daemon: RealDaemon, client: DaemonClient) -> None:
    address, code = waiting_agent(daemon, "wizard-box")
    wizard = PairingWizard(client)
    try:
        await wizard.look_up("127.0.0.1:9")  # nothing listens there
        assert wizard.state.value.step == WizardStep.CHOOSE and "No MirbadLLM agent" in (wizard.state.value.error or "")
        await wizard.look_up(address)
        entry = wizard.state.value.candidate
        assert wizard.state.value.step == WizardStep.CONFIRM and entry is not None
        assert (entry.name, entry.address) == ("wizard-box", address)
        assert await wizard.pair("ABC") is None and "not a pairing code" in (wizard.state.value.error or "")
        assert not any(n.name == "wizard-box" for n in await client.list_nodes())
        assert await wizard.pair(wrong(code)) is None and "Wrong pairing code" in (wizard.state.value.error or "")
        node = await wizard.pair(f"{code[:4].lower()} {code[4:].lower()}")  # as typed: lower case, a space
        assert node is not None and wizard.state.value.step == WizardStep.DONE
        paired = next(n for n in await client.list_nodes() if n.name == "wizard-box")
        assert paired.id == node.id and paired.fingerprint == entry.fingerprint
    finally:
        await client.close()


# --- widgets ----------------------------------------------------------------------------------------
@pytest.fixture
def window(client: DaemonClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(client, nodes_loaded=True)


def _text(widget: Any) -> str:
    return "\n".join(w.text() for w in widget.findChildren(QLabel))


@pytest.mark.gui
def test_pair_a_discovered_node_see_its_gpus_and_remove_it(window: MainWindow, daemon: RealDaemon,
                                                           qtbot: Any) -> None:
    window.show_page("nodes")
    page = window.nodes
    assert page.list.count() == 1 and page.panel.title.text() == "This machine"
    assert not page.panel.remove_button.isVisible()
    address, code = waiting_agent(daemon, "gpu-box", [REMOTE_GPU])
    entry = looked_up(daemon, address)
    qtbot.waitUntil(lambda: page.waiting.isVisible() and "gpu-box" in _text(page.waiting))
    assert entry.short_fingerprint in _text(page.waiting)

    dialog = page.open_pairing(entry)
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1)
    assert dialog.fingerprint.text() == entry.short_fingerprint  # what the user compares
    dialog.code.setText(wrong(code))
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: "Wrong pairing code" in dialog.error.text())
    dialog.code.setText(f"{code[:4].lower()}-{code[4:].lower()}")
    dialog.pair_button.click()
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 2, timeout=30_000)
    assert "“gpu-box” is paired" in dialog.done_text.text() and dialog.code.text() == ""
    dialog.accept()
    qtbot.waitUntil(lambda: page.list.count() == 2 and page.panel.title.text() == "gpu-box")
    assert not page.waiting.isVisible()
    qtbot.waitUntil(lambda: page.panel.gpus.rowCount() == 1 and page.panel.badge.text() == "Online", timeout=10_000)
    assert page.panel.gpus.item(0, 1).text() == "GPU-remote-0"
    node = page.panel.node
    assert page.panel.values["memory"].text() == f"{fmt.size(node.memory_available)} free of " \
                                                 f"{fmt.size(node.memory_total)}"  # the agent's machine
    assert not window.grab().isNull()

    asked: list[str] = []
    page.confirm = lambda _parent, text: asked.append(text) or True  # type: ignore[func-returns-value]
    page.panel.remove_button.click()
    qtbot.waitUntil(lambda: page.list.count() == 1, timeout=30_000)
    assert "shows a new pairing code" in asked[0]
    assert [n.id for n in daemon.call(lambda deps: deps.nodes.views())] == ["local"]  # the daemon forgot it


@pytest.fixture
def placed(daemon: RealDaemon, client: DaemonClient, tmp_path: Path) -> str:
    """The id of "placed-box" (paired, its GPU 40 GiB free), with alpha (a tiny GGUF both machines can
    read: they are one here) on this machine, before the window opens."""
    (tmp_path / "alpha.gguf").write_bytes(gguf_bytes())
    daemon.call(lambda deps: deps.registry.add(definition("alpha", node="local", model_path=str(tmp_path / "alpha.gguf"))))
    return daemon.add_node("placed-box", [REMOTE_GPU])


@pytest.mark.gui
def test_the_model_editor_places_a_model_on_a_paired_node(placed: str, window: MainWindow, daemon: RealDaemon,
                                                          qtbot: Any) -> None:
    window.show_page("models")
    editor = window.models.panel.settings
    window.models.panel.tabs.setCurrentIndex(SETTINGS)
    picker = editor.editors["node"]
    assert isinstance(picker, QComboBox)
    qtbot.waitUntil(lambda: picker.count() == 2, timeout=10_000)
    labels = [picker.itemText(i) for i in range(picker.count())]
    assert labels[0].startswith("This machine — ") and labels[0].endswith(" GiB free")
    assert labels[1].startswith("placed-box — ") and labels[1].endswith(" GiB free · GPU 40.0 GiB free")
    picker.setCurrentIndex(1)
    editor.save()
    qtbot.waitUntil(lambda: daemon.call(lambda deps: deps.registry.get("alpha")).node == placed, timeout=30_000)


@pytest.mark.gui
def test_a_node_without_a_gpu_says_so_in_its_gpu_charts(window: MainWindow, daemon: RealDaemon,
                                                        qtbot: Any) -> None:
    bare = daemon.add_node("gpu-less")  # its probe reports no GPU
    window.show_page("nodes")
    window.nodes.vm.select(bare)
    panel = window.nodes.panel
    charts = {chart.title: chart for chart in panel.charts}
    qtbot.waitUntil(lambda: panel.title.text() == "gpu-less")
    assert not panel.node.gpus
    qtbot.waitUntil(lambda: charts["GPU memory"].message == "No GPU on this node")
    assert charts["GPU utilisation"].message == "No GPU on this node" and charts["CPU"].message is None
    panel.show_node(panel.node.model_copy(update={"gpus": [GpuInfo(index=0, name="RTX", memory_total=1)]}))
    assert charts["GPU memory"].message is None and charts["GPU utilisation"].message is None
