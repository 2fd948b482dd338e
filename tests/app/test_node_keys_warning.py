"""The Nodes page says which node's agent key is a plain 0600 file (no keychain there): a line on its
row in the list, the agent's own warning in its panel; a node whose key is in the keychain says nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from memory_daemon import DemoDaemon
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.ui.main_window import MainWindow
from app.viewmodels.nodes import gpu_health
from daemon.api.contracts import KeysAtRest
from daemon.api.nodes import NodeState, NodeView

pytestmark = pytest.mark.gui

PLAIN = KeysAtRest(keychain=False, plain_files=["agent.key"], backend="keyring.backends.fail.Keyring",
                   warning="Private keys (agent.key) are stored unencrypted, as files readable only by this user "
                           "(0600): no OS keychain is available (keyring backend keyring.backends.fail.Keyring).")
KEYCHAIN = KeysAtRest(keychain=True, backend="keyring.backends.SecretService.Keyring")


def _row_notes(win: MainWindow) -> dict[str, str | None]:
    """node id -> the tooltip of its row's keys line (None: no such line)."""
    found: dict[str, str | None] = {}
    for i in range(win.nodes.list.count()):
        item = win.nodes.list.item(i)
        note = win.nodes.list.itemWidget(item).findChild(QLabel, "NodeRowKeys")
        found[item.data(Qt.ItemDataRole.UserRole)] = note.toolTip() if note is not None else None
    return found


def test_the_node_whose_key_is_a_plain_file_says_so(open_main_window: Callable[..., MainWindow], qtbot: Any) -> None:
    fake = FakeDaemonClient([])
    fake.nodes = [NodeView(id="local", name="ws", local=True, state=NodeState.ONLINE, keys_at_rest=KEYCHAIN),
                  NodeView(id="b" * 64, name="headless", address="10.0.0.9:9443", state=NodeState.ONLINE,
                           keys_at_rest=PLAIN)]
    win = open_main_window(fake, nodes_loaded=True)
    win.show_page("nodes")
    assert _row_notes(win) == {"local": None, "b" * 64: PLAIN.warning}
    panel = win.nodes.panel
    assert not panel.keys.isVisible()  # this machine is selected: its key is in the keychain

    win.nodes.vm.select("b" * 64)
    qtbot.waitUntil(lambda: panel.keys.isVisible())
    assert panel.keys.text() == f"This node's agent: {PLAIN.warning}"
    win.nodes.vm.select("local")
    qtbot.waitUntil(lambda: not panel.keys.isVisible())


def test_the_demo_fleet_shows_a_plain_key_and_a_gpus_health() -> None:
    nodes = {n.name: n for n in DemoDaemon().nodes}
    assert nodes["old-laptop"].keys_at_rest is not None and "0600" in (nodes["old-laptop"].keys_at_rest.warning or "")
    assert gpu_health(nodes["workstation"].gpus[0]) == "ECC 2 corrected, 0 uncorrected · throttled: sw power cap"


def test_the_gpu_health_is_in_view_at_the_screenshots_size(open_main_window: Callable[..., MainWindow],
                                                          qtbot: Any) -> None:
    demo = DemoDaemon()
    demo.ready_after = None
    win = open_main_window(demo, nodes_loaded=True, size=(1280, 800))
    win.show_page("nodes")
    table = win.nodes.panel.gpus
    qtbot.waitUntil(lambda: table.rowCount() == 1 and table.viewport().width() > 0)
    health = table.item(0, 6)
    assert health.text().startswith("ECC 2 corrected") and health.toolTip() == health.text()
    assert table.columnViewportPosition(6) + table.columnWidth(6) <= table.viewport().width()  # not scrolled off
    assert table.columnWidth(6) >= 150  # room for the words, not a sliver
    assert table.item(0, 0).toolTip() == "UUID GPU-4090"  # the UUID column is hidden, its value kept here
