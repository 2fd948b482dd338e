"""The Nodes page says which node's agent key is a plain 0600 file (no keychain there): a line on its
row in the list, the agent's own warning in its panel; a node whose key is in the keychain says nothing.
Real agents paired with the real daemon: one started without a keychain (the tests' default), the
others with an in-memory OS keychain (``tests/fakes/keychain.py``), so their keys are encrypted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.ui.main_window import MainWindow
from app.viewmodels.nodes import gpu_health
from daemon.api.client import DaemonClient
from daemon.api.contracts import GpuEcc, GpuInfo
from tests.fakes.keychain import MemoryKeychain

pytestmark = pytest.mark.gui

RTX = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", memory_total=24 << 30,
              memory_used=15 << 30, utilization_percent=58.0, temperature_c=64.0, power_w=285.0,
              ecc=GpuEcc(volatile_corrected=2, volatile_uncorrected=0), throttle_reasons=["sw_power_cap"],
              xid_events=0)


@pytest.fixture(scope="module")
def nodes(real_daemon: Any) -> Iterator[dict[str, str]]:
    """name -> node id: "headless" (started without a keychain: its key is a plain file), then, with an
    OS keychain for the rest of the module, "vaulted" and "workstation" (an RTX 4090 reporting ECC
    errors and a power cap), whose keys are encrypted in it."""
    import keyring

    headless = real_daemon.add_node("headless")
    previous = keyring.get_keyring()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIRBADLLM_KEYRING", "os")
        keyring.set_keyring(MemoryKeychain())
        try:
            yield {"headless": headless, "vaulted": real_daemon.add_node("vaulted"),
                   "workstation": real_daemon.add_node("workstation", gpus=[RTX])}
        finally:
            keyring.set_keyring(previous)


def _row_notes(win: MainWindow) -> dict[str, str | None]:
    """node id -> the tooltip of its row's keys line (None: no such line)."""
    found: dict[str, str | None] = {}
    for i in range(win.nodes.list.count()):
        item = win.nodes.list.item(i)
        note = win.nodes.list.itemWidget(item).findChild(QLabel, "NodeRowKeys")
        found[item.data(Qt.ItemDataRole.UserRole)] = note.toolTip() if note is not None else None
    return found


def test_the_node_whose_key_is_a_plain_file_says_so(real_daemon: Any, nodes: dict[str, str],
                                                    open_main_window: Callable[..., MainWindow], qtbot: Any) -> None:
    client = DaemonClient(*real_daemon, client_name="app")
    win = open_main_window(client, nodes_loaded=True)
    vm = win.nodes.vm
    qtbot.waitUntil(lambda: all((n := vm.state.value.node(i)) is not None and n.keys_at_rest is not None
                                for i in nodes.values()))
    plain = vm.state.value.node(nodes["headless"]).keys_at_rest
    assert plain is not None and not plain.keychain and plain.plain_files == ["agent.key"]
    assert plain.warning is not None and "agent.key" in plain.warning and "unencrypted" in plain.warning
    win.show_page("nodes")
    notes = _row_notes(win)
    assert {nodes[k]: notes[nodes[k]] for k in nodes} == {nodes["headless"]: plain.warning,
                                                          nodes["vaulted"]: None, nodes["workstation"]: None}
    panel = win.nodes.panel
    vm.select(nodes["vaulted"])
    qtbot.waitUntil(lambda: panel.title.text() == "vaulted")
    assert not panel.keys.isVisible()  # its key is in the keychain

    vm.select(nodes["headless"])
    qtbot.waitUntil(lambda: panel.keys.isVisible())
    assert panel.keys.text() == f"This node's agent: {plain.warning}"
    vm.select(nodes["vaulted"])
    qtbot.waitUntil(lambda: not panel.keys.isVisible())


def test_the_gpu_health_is_in_view_at_the_screenshots_size(real_daemon: Any, nodes: dict[str, str],
                                                          open_main_window: Callable[..., MainWindow],
                                                          qtbot: Any) -> None:
    assert gpu_health(RTX) == "ECC 2 corrected, 0 uncorrected · throttled: sw power cap"
    win = open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True, size=(1280, 800))
    win.show_page("nodes")
    win.nodes.vm.select(nodes["workstation"])
    table = win.nodes.panel.gpus
    qtbot.waitUntil(lambda: win.nodes.panel.title.text() == "workstation" and table.rowCount() == 1
                    and table.viewport().width() > 0)
    health = table.item(0, 6)
    assert health.text().startswith("ECC 2 corrected") and health.toolTip() == health.text()
    assert table.columnViewportPosition(6) + table.columnWidth(6) <= table.viewport().width()  # not scrolled off
    assert table.columnWidth(6) >= 150  # room for the words, not a sliver
    assert table.item(0, 0).toolTip() == "UUID GPU-4090"  # the UUID column is hidden, its value kept here
