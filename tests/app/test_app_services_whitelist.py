"""The Services page's whitelist edits over the fake daemon, offscreen: with every service shown, "Allow"
on one not whitelisted (this node's block of the daemon's whitelist), "Remove from whitelist" on one
the daemon whitelists, nothing offered for a system service on the deny list (its reason shown) nor
a removal for one the agent's own file whitelists; a refused edit is said and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QApplication, QPushButton

from app.ui.main_window import MainWindow
from daemon.api.client import DaemonError
from daemon.api.services import ServiceNames


@pytest.fixture
def window(fake: FakeDaemonClient, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(fake, nodes_loaded=True)


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
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    _every_service(window, qtbot)
    assert _verdict(window, "nginx") == "Not whitelisted"
    assert _button(window, "stop-nginx.service") is None
    _button(window, "allow-nginx.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "nginx allowed on this machine" in window.statusBar().currentMessage())
    assert _verdict(window, "nginx") == "Manageable"
    assert fake.called("set_services_policy")[-1] == (ServiceNames(allow=["nginx"]), "local")
    assert _button(window, "stop-nginx.service") is not None  # running: it may be stopped now
    assert _button(window, "allow-nginx.service") is None and _button(window, "unallow-nginx.service") is not None
    assert _tip(window, "nginx") == "Whitelisted for this node by the daemon's services.json."


def test_a_system_service_on_the_deny_list_says_why_and_offers_nothing(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    _every_service(window, qtbot)
    for shown, name, pattern in (("ssh", "ssh.service", "ssh*"), ("dbus", "dbus.service", "dbus*"),
                                 ("mirbadllm-agent", "mirbadllm-agent.service", "mirbadllm*")):
        assert _verdict(window, shown) == f"System — not manageable ({pattern})"
        assert "cannot be whitelisted" in _tip(window, shown) and pattern in _tip(window, shown)
        for prefix in ("allow", "unallow", "start", "stop", "restart"):
            assert _button(window, f"{prefix}-{name}") is None, (prefix, name)
    # Whitelisted by the agent's own file on the node: nothing here can take it off.
    assert _button(window, "unallow-ollama.service") is None
    assert "agent's own services.json" in _tip(window, "ollama")
    assert fake.called("set_services_policy") == []


def test_remove_from_whitelist_takes_it_off_every_node_and_the_page(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    window.show_page("services")
    qtbot.waitUntil(lambda: _button(window, "unallow-open-webui.service") is not None)
    assert _tip(window, "open-webui") == "Whitelisted for every node by the daemon's services.json."
    _button(window, "unallow-open-webui.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "open-webui removed from every node's whitelist" in window.statusBar().currentMessage())
    assert _row(window, "open-webui") is None  # only whitelisted ones are shown
    assert fake.called("set_services_policy")[-1] == (ServiceNames(), None)
    window.services.show_all.click()
    qtbot.waitUntil(lambda: _row(window, "open-webui") is not None)
    assert _verdict(window, "open-webui") == "Not whitelisted"
    assert _button(window, "allow-open-webui.service") is not None


def test_a_refused_allow_is_said_and_nothing_changes(window: MainWindow, fake: FakeDaemonClient,
                                                    qtbot: Any) -> None:
    _every_service(window, qtbot)
    fake.fail_next["set_services_policy"] = DaemonError(
        422, "service_denied", "allow: nginx is a system service MirbadLLM can never manage (deny list: nginx*)")
    _button(window, "allow-nginx.service").click()  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: "can never manage" in window.statusBar().currentMessage())
    assert _verdict(window, "nginx") == "Not whitelisted"
    assert _button(window, "allow-nginx.service") is not None
    policy = fake._policy()
    assert policy.nodes == {} and policy.allow == ["open-webui"]


def test_without_the_daemons_whitelist_the_services_still_show_and_no_edit_is_offered(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    async def older_daemon(node_id: str | None = None) -> Any:
        fake._record("services_policy", node_id)
        raise DaemonError(404, "not_found", "no route GET /api/nodes/local/services/policy")

    fake.services_policy = older_daemon  # type: ignore[method-assign]
    window.show_page("services")
    window.services.show_all.click()
    qtbot.waitUntil(lambda: _row(window, "nginx") is not None and len(fake.called("services_policy")) >= 2)
    assert _verdict(window, "nginx") == "Not whitelisted"
    assert _button(window, "allow-nginx.service") is None and _button(window, "unallow-open-webui.service") is None
    assert _button(window, "stop-open-webui.service") is not None  # its actions stay
