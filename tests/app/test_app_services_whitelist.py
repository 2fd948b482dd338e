"""The Services page's whitelist edits over the real daemon, offscreen: with every service shown, "Allow"
on one not whitelisted (this node's block of the daemon's whitelist), "Remove from whitelist" on one
the daemon whitelists, nothing offered for a system service on the deny list (its reason shown) nor
a removal for one the agent's own file whitelists; a refused edit is said and changes nothing. The
node is a real agent (``real_daemon.host_services_node``: its service manager the tests' systemd in
memory, its own services.json whitelisting docker, the NVIDIA persistence daemon and ollama)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication, QPushButton
from real_daemon import host_services_node, reset_host_services

from app.ui.main_window import MainWindow
from daemon.api.client import DaemonClient
from daemon.api.services import ServicesPolicy


@pytest.fixture(scope="module")
def node(real_daemon: Any) -> tuple[str, Any]:
    return host_services_node(real_daemon)  # type: ignore[no-any-return]


@pytest.fixture
def window(real_daemon: Any, node: tuple[str, Any], open_main_window: Callable[..., MainWindow]) -> MainWindow:
    reset_host_services(real_daemon, node[1])  # the node's units, the daemon's whitelist: open-webui everywhere
    return open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)


def _policy_file(real_daemon: Any) -> Path:
    return real_daemon.deps.paths.home / "services.json"  # type: ignore[no-any-return]


def _policy(real_daemon: Any) -> ServicesPolicy:
    async def read(_deps: Any) -> ServicesPolicy:
        client = DaemonClient(*real_daemon)
        try:
            return await client.services_policy()
        finally:
            await client.close()

    return real_daemon.call(read)  # type: ignore[no-any-return]


def _row(win: MainWindow, shown: str) -> int | None:
    table = win.services.table
    return next((r for r in range(table.rowCount()) if table.item(r, 0).text() == shown), None)


def _verdict(win: MainWindow, shown: str) -> str:
    row = _row(win, shown)
    assert row is not None, shown
    return win.services.table.item(row, 3).text()


def _tip(win: MainWindow, shown: str) -> str:
    row = _row(win, shown)
    assert row is not None, shown
    return win.services.table.item(row, 3).toolTip()


def _button(win: MainWindow, name: str) -> QPushButton | None:
    # A row rebuilt leaves its old buttons to a deferred delete: let them go before looking.
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return win.services.findChild(QPushButton, name)


def _every_service(win: MainWindow, qtbot: Any) -> None:
    win.show_page("services")
    qtbot.waitUntil(lambda: win.services.table.rowCount() > 0)
    win.services.show_all.click()
    qtbot.waitUntil(lambda: _row(win, "nginx") is not None and _button(win, "allow-nginx.service") is not None)


def test_allow_whitelists_a_service_on_this_node_and_it_becomes_manageable(
        window: MainWindow, real_daemon: Any, node: tuple[str, Any], qtbot: Any) -> None:
    _every_service(window, qtbot)
    assert _verdict(window, "nginx") == "Not whitelisted"
    assert _button(window, "stop-nginx.service") is None
    _button(window, "allow-nginx.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "nginx allowed on gpu-box" in window.statusBar().currentMessage())
    assert _verdict(window, "nginx") == "Manageable"
    policy = _policy(real_daemon)
    assert policy.names(node[0]).allow == ["nginx"] and policy.allow == ["open-webui"]  # this node's block only
    assert _button(window, "stop-nginx.service") is not None  # running: it may be stopped now
    assert _button(window, "allow-nginx.service") is None and _button(window, "unallow-nginx.service") is not None
    assert _tip(window, "nginx") == "Whitelisted for this node by the daemon's services.json."


def test_a_system_service_on_the_deny_list_says_why_and_offers_nothing(
        window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    before = _policy_file(real_daemon).read_text()
    _every_service(window, qtbot)
    for shown, name, pattern in (("ssh", "ssh.service", "ssh*"), ("dbus", "dbus.service", "dbus*"),
                                 ("mirbadllm-agent", "mirbadllm-agent.service", "mirbadllm-agent*")):
        assert _verdict(window, shown) == f"System — not manageable ({pattern})"
        assert "cannot be whitelisted" in _tip(window, shown) and pattern in _tip(window, shown)
        for prefix in ("allow", "unallow", "start", "stop", "restart"):
            assert _button(window, f"{prefix}-{name}") is None, (prefix, name)
    # Whitelisted by the agent's own file on the node: nothing here can take it off.
    assert _button(window, "unallow-ollama.service") is None
    assert "agent's own services.json" in _tip(window, "ollama")
    assert _policy_file(real_daemon).read_text() == before  # the daemon's whitelist untouched


def test_remove_from_whitelist_takes_it_off_every_node_and_the_page(
        window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    window.show_page("services")
    qtbot.waitUntil(lambda: _button(window, "unallow-open-webui.service") is not None)
    assert _tip(window, "open-webui") == "Whitelisted for every node by the daemon's services.json."
    _button(window, "unallow-open-webui.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "open-webui removed from every node's whitelist" in window.statusBar().currentMessage())
    assert _row(window, "open-webui") is None  # only whitelisted ones are shown
    policy = _policy(real_daemon)
    assert policy.allow == [] and policy.nodes == {}
    window.services.show_all.click()
    qtbot.waitUntil(lambda: _row(window, "open-webui") is not None)
    assert _verdict(window, "open-webui") == "Not whitelisted"
    assert _button(window, "allow-open-webui.service") is not None


def test_a_refused_allow_is_said_and_nothing_changes(window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    _every_service(window, qtbot)
    broken = b'{"allow": ["open-webui"'  # the daemon's services.json, half written by hand since the page read it
    _policy_file(real_daemon).write_bytes(broken)
    _button(window, "allow-nginx.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "services.json is unreadable" in window.statusBar().currentMessage())
    assert _verdict(window, "nginx") == "Not whitelisted"
    assert _policy_file(real_daemon).read_bytes() == broken  # never overwritten: nothing lost
    assert _button(window, "stop-nginx.service") is None and _button(window, "allow-nginx.service") is not None


def test_without_the_daemons_whitelist_the_services_still_show_and_no_edit_is_offered(
        window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    _policy_file(real_daemon).write_text(json.dumps({"allow": "open-webui"}))  # not a list: unreadable
    window.show_page("services")
    window.services.show_all.click()
    qtbot.waitUntil(lambda: _row(window, "nginx") is not None and _button(window, "stop-open-webui.service") is None
                    and _row(window, "docker") is not None)
    assert _verdict(window, "nginx") == "Not whitelisted"
    assert _button(window, "allow-nginx.service") is None and _button(window, "unallow-open-webui.service") is None
    assert _button(window, "stop-ollama.service") is None and _button(window, "start-ollama.service") is not None
    assert _button(window, "restart-docker.service") is not None  # the agent's own whitelist: its actions stay
