"""The Services page over the real daemon, offscreen: a node's whitelisted services with their state,
start/stop/restart, the typed-name confirm for a protected one, the deny list shown and never offered.
The node is a real agent (``real_daemon.host_services_node``) whose service manager is the tests'
systemd in memory (``tests/fakes/services.py``): what reached the OS is its ``calls``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication, QLabel, QPushButton
from real_daemon import host_services_node, reset_host_services

from app.ui.main_window import MainWindow
from app.ui.pages.services import ServiceConfirmDialog
from daemon.api.client import DaemonClient
from daemon.api.services import ServiceInfo


@pytest.fixture(scope="module")
def node(real_daemon: Any) -> tuple[str, Any]:
    return host_services_node(real_daemon)  # type: ignore[no-any-return]


@pytest.fixture
def host(real_daemon: Any, node: tuple[str, Any]) -> Any:
    """The node's service manager, as it started (and the daemon's whitelist too)."""
    reset_host_services(real_daemon, node[1])
    return node[1]


@pytest.fixture
def window(real_daemon: Any, host: Any, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)


def _rows(win: MainWindow) -> dict[str, tuple[str, str]]:
    table = win.services.table
    found = {}
    for row in range(table.rowCount()):
        state = table.cellWidget(row, 2)
        assert isinstance(state, QLabel)
        found[table.item(row, 0).text()] = (state.text(), table.item(row, 3).text())
    return found


def _button(win: MainWindow, name: str) -> QPushButton | None:
    return win.services.findChild(QPushButton, name)


def test_the_page_lists_a_nodes_whitelisted_services_and_starts_one(window: MainWindow, host: Any,
                                                                   qtbot: Any) -> None:
    window.show_page("services")
    qtbot.waitUntil(lambda: window.services.table.rowCount() > 0)
    rows = _rows(window)
    assert rows["ollama"] == ("Stopped", "Manageable")
    assert rows["docker"] == ("Running", "Protected — type its name")
    assert "ssh" not in rows  # only the whitelisted ones, until every service is asked for
    assert window.services.node_picker.currentText() == "gpu-box"
    assert "systemd: 4 services whitelisted" in window.services.note.text()
    start = _button(window, "start-ollama.service")
    assert start is not None and _button(window, "stop-ollama.service") is None
    start.click()
    qtbot.waitUntil(lambda: _rows(window)["ollama"][0] == "Running")
    assert host.calls == [("start", "ollama.service")] and host.units["ollama.service"].running
    assert _button(window, "stop-ollama.service") is not None


def test_a_protected_service_acts_only_with_its_name_typed(window: MainWindow, host: Any, qtbot: Any) -> None:
    window.show_page("services")
    qtbot.waitUntil(lambda: _button(window, "restart-docker.service") is not None)
    pid = host.units["docker.service"].pid
    asked: list[str] = []
    window.services.ask_confirm = lambda _w, info, action, node: asked.append(f"{action} {info.name} {node}") or None
    _button(window, "restart-docker.service").click()  # type: ignore[union-attr]
    assert asked == ["restart docker.service gpu-box"]
    assert host.calls == []  # cancelled: nothing sent

    window.services.ask_confirm = lambda _w, info, action, node: "docker"
    _button(window, "restart-docker.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: len(host.calls) == 1)
    assert host.calls == [("restart", "docker.service")]  # the typed name let it through to the node
    qtbot.waitUntil(lambda: host.units["docker.service"].pid != pid and _rows(window)["docker"][0] == "Running")


def test_the_confirm_dialog_opens_its_button_only_on_the_exact_name(qapp: QApplication) -> None:
    docker = ServiceInfo(name="docker.service", display_name="docker", whitelisted=True, protected=True)
    dialog = ServiceConfirmDialog(docker, "stop", "gpu-box")
    assert not dialog.ok.isEnabled()
    dialog.name.setText("dock")
    assert not dialog.ok.isEnabled()
    dialog.name.setText("Docker")
    assert dialog.ok.isEnabled() and dialog.typed() == "Docker"
    dialog.name.setText("docker.service ")
    assert dialog.ok.isEnabled()
    dialog.close()


def test_every_service_shows_why_a_system_one_is_not_manageable_and_offers_nothing(
        window: MainWindow, host: Any, qtbot: Any) -> None:
    window.show_page("services")
    qtbot.waitUntil(lambda: window.services.table.rowCount() > 0)
    window.services.show_all.click()
    qtbot.waitUntil(lambda: "ssh" in _rows(window))
    rows = _rows(window)
    assert rows["ssh"] == ("Running", "System — not manageable (ssh*)")
    assert rows["nginx"][1] == "Not whitelisted"
    for name in ("ssh.service", "dbus.service", "mirbadllm-agent.service", "nginx.service"):
        for action in ("start", "stop", "restart"):
            assert _button(window, f"{action}-{name}") is None, (action, name)


def test_a_refused_action_is_said_and_the_state_stays(window: MainWindow, host: Any, qtbot: Any) -> None:
    window.show_page("services")
    qtbot.waitUntil(lambda: _button(window, "stop-open-webui.service") is not None)
    host.failing["open-webui.service"] = "Interactive authentication required."  # as systemctl says it
    _button(window, "stop-open-webui.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "Interactive authentication required" in window.statusBar().currentMessage())
    assert _rows(window)["open-webui"][0] == "Running" and host.units["open-webui.service"].running
