"""The Nodes page says which node's agent key is a plain 0600 file (no keychain there): a line on its
row in the list, the agent's own warning in its panel; a node whose key is in the keychain says nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

from app.ui.main_window import MainWindow
from app.viewmodels.nodes import gpu_health
from daemon.api.contracts import GpuEcc, GpuInfo, KeysAtRest
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


def test_the_gpu_health_is_in_view_at_the_screenshots_size(open_main_window: Callable[..., MainWindow],
                                                          qtbot: Any) -> None:
    demo = FakeDaemonClient([])
    gpu = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-4090", memory_total=24 << 30,
                  memory_used=15 << 30, utilization_percent=58.0, temperature_c=64.0, power_w=285.0,
                  ecc=GpuEcc(volatile_corrected=2, volatile_uncorrected=0), throttle_reasons=["sw_power_cap"],
                  xid_events=0)
    demo.nodes = [NodeView(id="local", name="workstation", local=True, state=NodeState.ONLINE, gpus=[gpu])]
    assert gpu_health(gpu) == "ECC 2 corrected, 0 uncorrected · throttled: sw power cap"
    win = open_main_window(demo, nodes_loaded=True, size=(1280, 800))
    win.show_page("nodes")
    table = win.nodes.panel.gpus
    qtbot.waitUntil(lambda: table.rowCount() == 1 and table.viewport().width() > 0)
    health = table.item(0, 6)
    assert health.text().startswith("ECC 2 corrected") and health.toolTip() == health.text()
    assert table.columnViewportPosition(6) + table.columnWidth(6) <= table.viewport().width()  # not scrolled off
    assert table.columnWidth(6) >= 150  # room for the words, not a sliver
    assert table.item(0, 0).toolTip() == "UUID GPU-4090"  # the UUID column is hidden, its value kept here
