"""Widgets offscreen (pytest-qt) over the fake daemon: pages render, the tray acts, editors validate."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QTableWidget,
)

from app.context import AppContext
from app.ui import theme
from app.ui.dialogs import NewKeyDialog
from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import CHARTS, LOGS, SETTINGS
from app.ui.tray import TrayController
from app.viewmodels.fleet import FleetState
from daemon.api.models import ApiKeyInfo, HistoryPoint, ModelState

pytestmark = pytest.mark.gui


@pytest.fixture
def ctx(fake: FakeDaemonClient, qloop: asyncio.AbstractEventLoop, qapp: QApplication, qtbot: Any,
        tmp_path: Path) -> Iterator[AppContext]:
    if theme.current_name() != "light" or not qapp.styleSheet():
        theme.apply(qapp, "light")
    context = AppContext.create(fake, tmp_path, prefs_path=tmp_path / "app.json", platform="linux",
                                host_refresh_s=3600)
    context.fleet.feed._poll_timeout = 5
    context.start()
    qtbot.waitUntil(lambda: context.fleet.snapshot.value.loaded)
    yield context
    context.logs.stop()
    context.charts.hide()


@pytest.fixture
def window(ctx: AppContext, qapp: QApplication) -> Iterator[MainWindow]:
    win = MainWindow(ctx, apply_theme=lambda mode: theme.apply(qapp, mode))
    win.resize(1280, 800)
    win.show()
    yield win
    win.quitting = True
    win.close()
    win.deleteLater()  # the whole widget tree goes now, not at exit: later tests stay quick
    qapp.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def texts(widget: Any) -> str:
    """Every piece of text a person could read (or copy) in ``widget``."""
    parts = [w.text() for w in widget.findChildren(QLabel)] + [w.text() for w in widget.findChildren(QLineEdit)]
    parts += [w.toPlainText() for w in widget.findChildren(QPlainTextEdit)]
    for table in widget.findChildren(QTableWidget):
        parts += [table.item(r, c).text() for r in range(table.rowCount()) for c in range(table.columnCount())
                  if table.item(r, c)]
    return "\n".join(parts)


def run(qtbot: Any, coro: Any) -> Any:
    task = asyncio.ensure_future(coro)
    qtbot.waitUntil(task.done, timeout=5000)
    return task.result()


def test_every_page_renders_with_data(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    fake.set_state("alpha", ModelState.READY)
    fake.set_state("beta", ModelState.FAILED, error="llama-server exited 1: out of memory")
    qtbot.waitUntil(lambda: window.overview.figures["failed"].text() == "1")
    overview = texts(window.overview)
    assert "http://127.0.0.1:8484/v1" in overview and "out of memory" in overview
    assert "NVIDIA RTX 4070" in overview and "12.0 GiB of 32.0 GiB" in overview
    window.show_page("models")
    assert window.models.list.count() == 2 and window.models.panel.title.text() == "alpha"
    window.show_page("playground")
    assert window.playground.model.currentText() == "alpha"
    window.show_page("access")
    qtbot.waitUntil(lambda: "http://127.0.0.1:8484/v1" in window.access.connect_card.text.toPlainText())
    window.show_page("settings")
    assert window.settings.theme_buttons["system"].isChecked()
    for key in ("overview", "models", "playground", "access", "settings"):
        window.show_page(key)
        assert not window.grab().isNull()
    assert window.stack.currentWidget() is window.settings


def test_tray_reflects_the_fleet_and_its_actions_call_the_daemon(ctx: AppContext, fake: FakeDaemonClient,
                                                                  qtbot: Any, qapp: QApplication) -> None:
    quits: list[str] = []
    tray = TrayController(ctx, open_window=lambda: quits.append("open"), quit_app=lambda: quits.append("quit"),
                          stop_all_and_quit=lambda: quits.append("stop-all"))
    assert tray.state == FleetState.IDLE
    tray.rebuild_menu()
    start = tray.action("tray-model-alpha")
    assert start is not None and "alpha — Stopped" in start.text() and "Start" in start.text()
    start.trigger()
    qtbot.waitUntil(lambda: fake.called("start_model") == [("alpha",)])
    qtbot.waitUntil(lambda: tray.state == FleetState.STARTING)
    fake.set_state("alpha", ModelState.READY)
    qtbot.waitUntil(lambda: tray.state == FleetState.READY)
    assert "1 of 2 models ready" in tray.icon.toolTip()
    assert [n.title for n in tray.notified] == ["alpha is ready"]
    tray.menu.aboutToShow.emit()  # the menu is rebuilt when it opens
    stop = tray.action("tray-model-alpha")
    assert stop is not None and "Ready" in stop.text() and "Stop" in stop.text()
    stop.trigger()
    qtbot.waitUntil(lambda: fake.called("stop_model") == [("alpha",)])
    fake.set_state("beta", ModelState.FAILED, error="exited 1")
    qtbot.waitUntil(lambda: tray.state == FleetState.FAILED)
    assert "failed" in tray.icon.toolTip() and tray.notified[-1].failed
    tray.action("tray-copy-url").trigger()  # type: ignore[union-attr]
    assert qapp.clipboard().text() == "http://127.0.0.1:8484/v1"
    for name in ("tray-open", "tray-quit", "tray-stop-all"):
        tray.action(name).trigger()  # type: ignore[union-attr]
    assert quits == ["open", "quit", "stop-all"]
    fake.unreachable = True
    ctx.fleet._on_connection(False, "cannot reach the daemon")
    assert tray.state == FleetState.UNREACHABLE and "unreachable" in tray.icon.toolTip()


def test_settings_editor_blocks_bad_values_with_a_message(window: MainWindow, fake: FakeDaemonClient,
                                                          qtbot: Any) -> None:
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(SETTINGS)
    editor = panel.settings
    ctx_edit = editor.editors["settings.ctx_size"]
    assert isinstance(ctx_edit, QLineEdit) and ctx_edit.placeholderText() == "default: from model"
    assert not editor.save_button.isEnabled(), "nothing changed yet"
    ctx_edit.setText("-5")
    error = editor.errors["settings.ctx_size"]
    assert error.isVisible() and "greater than or equal to 0" in error.text()
    assert not editor.save_button.isEnabled() and "1 value to fix" in editor.summary.text()
    ctx_edit.setText("4096")
    assert not error.isVisible() and editor.save_button.isEnabled()
    editor.save_button.click()
    qtbot.waitUntil(lambda: len(fake.called("update_model")) == 1)
    assert fake.called("update_model")[0][0].settings.ctx_size == 4096
    assert fake.called("create_model") == []


def test_scrolling_the_settings_form_over_a_field_changes_nothing(window: MainWindow, qtbot: Any) -> None:
    """At 1280x800 the form scrolls under the pointer: a wheel over a choice or a number it has not
    focused scrolls the page, never changes the value (flash attention went default, on, auto)."""
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication, QComboBox

    window.resize(1280, 800)
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(SETTINGS)
    editor = panel.settings
    combo = editor.editors["settings.flash_attn"]
    assert isinstance(combo, QComboBox) and not combo.hasFocus()
    before = combo.currentIndex()
    for delta in (-120, -120, 120):
        wheel = QWheelEvent(QPointF(combo.rect().center()), QPointF(combo.mapToGlobal(combo.rect().center())),
                            QPoint(0, 0), QPoint(0, delta), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                            Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(combo, wheel)
    assert combo.currentIndex() == before and not editor.save_button.isEnabled(), "nothing changed, nothing to save"
    combo.setFocus()  # clicked or tabbed to: now the wheel is the user's to change it with
    qtbot.waitUntil(combo.hasFocus)
    QApplication.sendEvent(combo, QWheelEvent(
        QPointF(combo.rect().center()), QPointF(combo.mapToGlobal(combo.rect().center())), QPoint(0, 0),
        QPoint(0, -120), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
        False))
    assert combo.currentIndex() != before and editor.save_button.isEnabled()


def test_saving_a_running_model_shows_restart_needed(window: MainWindow, ctx: AppContext, fake: FakeDaemonClient,
                                                     qtbot: Any) -> None:
    run(qtbot, ctx.fleet.start_model("alpha"))
    window.show_page("models")
    editor = window.models.panel.settings
    window.models.panel.tabs.setCurrentIndex(SETTINGS)
    assert not editor.restart_note.isVisible()
    editor.editors["settings.parallel"].setText("4")  # type: ignore[attr-defined]
    editor.save_button.click()
    qtbot.waitUntil(lambda: editor.restart_note.isVisible())
    assert window.models.panel.restart_badge.isVisible()
    editor.restart_now.click()
    qtbot.waitUntil(lambda: fake.called("restart_model") == [("alpha",)])


def test_add_duplicate_and_delete_a_model(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    window.show_page("models")
    window.models.add_button.click()
    editor = window.models.panel.settings
    assert editor.form is not None and editor.form.is_new
    editor.editors["id"].setText("Not Valid")  # type: ignore[attr-defined]
    assert "lowercase letters" in editor.errors["id"].text() and not editor.save_button.isEnabled()
    editor.editors["id"].setText("gamma")  # type: ignore[attr-defined]
    editor.editors["served_name"].setText("Gamma")  # type: ignore[attr-defined]
    editor.save_button.click()
    qtbot.waitUntil(lambda: window.models.list.count() == 3)
    assert fake.called("create_model")[0][0].served_name == "Gamma"
    qtbot.waitUntil(lambda: window.models.panel.title.text() == "Gamma")
    editor.duplicate_button.click()
    assert editor.form.is_new and editor.form.values["id"] == "gamma-copy"
    window.models.select("alpha")
    editor.confirm = lambda _parent, text: "alpha" in text
    editor.delete_button.click()
    qtbot.waitUntil(lambda: fake.called("delete_model") == [("alpha",)])
    qtbot.waitUntil(lambda: window.models.list.count() == 2)


def test_api_key_is_shown_once_and_never_listed(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    window.show_page("access")
    page = window.access
    page.ask_name = lambda _parent: "laptop"
    page.create_button.click()
    qtbot.waitUntil(lambda: any(isinstance(w, NewKeyDialog) and w.isVisible() for w in QApplication.topLevelWidgets()))
    dialog = next(w for w in QApplication.topLevelWidgets() if isinstance(w, NewKeyDialog) and w.isVisible())
    secret = fake.issued_secrets[0]
    assert dialog.field.edit.text() == secret
    dialog.field.copy()
    assert QApplication.clipboard().text() == secret
    dialog.close()
    assert dialog.field.edit.text() == "", "the secret leaves with the dialog"
    qtbot.waitUntil(lambda: page.table.rowCount() == 1)
    listed = texts(window)
    assert "laptop" in listed and secret[:14] in listed and secret not in listed
    page.findChild(type(page.create_button), "revoke-k1").click()
    qtbot.waitUntil(lambda: fake.called("revoke_key") == [("k1",)])
    qtbot.waitUntil(lambda: page.table.rowCount() == 0)


def test_lan_access_says_keys_are_needed_and_sets_them(window: MainWindow, fake: FakeDaemonClient,
                                                       qtbot: Any) -> None:
    fake.keys["k9"] = ApiKeyInfo(id="k9", name="editor", prefix="sk-mirbad-ab12", created_at=0.0)  # LAN needs a key
    window.show_page("access")
    page = window.access
    assert "turns on required API keys" in page.lan_note.text()
    page.lan.click()
    qtbot.waitUntil(lambda: fake.settings.lan_access)
    assert fake.settings.require_api_keys
    qtbot.waitUntil(lambda: page.require.isChecked() and not page.require.isEnabled())
    qtbot.waitUntil(lambda: 'apiKey: "YOUR_API_KEY"' in page.connect_card.text.toPlainText())


def test_logs_follow_and_search(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    fake.log_lines["alpha"] = ["main: loading model", "main: server is listening on http://127.0.0.1:18080"]
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(LOGS)
    text = panel.logs.text
    qtbot.waitUntil(lambda: "server is listening" in text.toPlainText())
    fake.add_log_line("alpha", "slot 0 | task 7 | processing task")
    qtbot.waitUntil(lambda: "processing task" in text.toPlainText())
    panel.logs.search.setText("loading")
    assert text.toPlainText() == "main: loading model"
    panel.tabs.setCurrentIndex(0)
    assert window.findChild(QPlainTextEdit, "LogText") is not None


def test_the_log_opens_at_the_newest_line_read_from_its_start(window: MainWindow, fake: FakeDaemonClient,
                                                              qtbot: Any) -> None:
    wide = "srv  params_from_: Chat format: Content-only " + "x" * 600
    fake.log_lines["alpha"] = [f"line {n}" for n in range(200)] + [wide]
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(LOGS)
    text = panel.logs.text
    qtbot.waitUntil(lambda: "Content-only" in text.toPlainText())
    assert text.horizontalScrollBar().maximum() > 0, "the long line is wider than the view"
    assert text.horizontalScrollBar().value() == 0, "not scrolled to the right"
    rows = text.verticalScrollBar()
    assert rows.value() >= rows.maximum() - 1, "at the newest line (the horizontal bar, once shown, takes one)"


def test_charts_draw_the_history(window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    fake.history["alpha"] = [HistoryPoint(ts=1000.0 + i, values={"gen_tps": float(i), "rss_bytes": 2.0**30})
                             for i in range(300)]
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(CHARTS)
    charts = {chart.title: chart for chart in panel.charts.charts}
    # Real values are drawn, not 300 timestamps of NaN: every point of the series the history holds.
    qtbot.waitUntil(lambda: charts["Tokens per second"].finite == (300, 0))
    assert charts["Process memory"].finite == (300,) and charts["KV cache use"].finite == (0,)
    assert "now 299.0 tok/s" in panel.charts.status.text()
    assert charts["GPU memory"].message is None, "this node has a GPU: its charts are drawn"
    panel.charts.range_buttons.buttons()[2].click()
    qtbot.waitUntil(lambda: ("alpha", "24h") in fake.called("model_history"))


def test_on_a_node_without_a_gpu_the_gpu_charts_say_so(window: MainWindow, ctx: AppContext, fake: FakeDaemonClient,
                                                       qtbot: Any) -> None:
    fake.hosts = [fake.hosts[0].model_copy(update={"gpus": []})]
    asyncio.ensure_future(ctx.fleet.resync())  # the hosts as the daemon now reports them
    qtbot.waitUntil(lambda: not ctx.fleet.snapshot.value.hosts[0].gpus)
    fake.history["alpha"] = [HistoryPoint(ts=1000.0 + i, values={"gen_tps": 1.0, "gpu_mem_bytes": None})
                             for i in range(3)]
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(CHARTS)
    charts = {chart.title: chart for chart in panel.charts.charts}
    qtbot.waitUntil(lambda: charts["GPU memory"].message == "No GPU on this node")
    assert charts["GPU utilisation"].message == "No GPU on this node"
    assert charts["GPU memory"].notice.isVisible() and "No GPU on this node" in charts["GPU memory"].notice.text()
    assert charts["Tokens per second"].message is None and charts["Tokens per second"].finite == (3, 0)


def test_closing_the_window_leaves_the_app_in_the_tray(window: MainWindow, ctx: AppContext) -> None:
    window.close()
    assert not window.isVisible() and not window.quitting
    assert ctx.fleet.snapshot.value.connected
    window.bring_to_front()
    assert window.isVisible()


def test_theme_switch_applies_and_is_remembered(window: MainWindow, ctx: AppContext, tmp_path: Path) -> None:
    window.settings.theme_buttons["dark"].click()
    assert theme.current_name() == "dark"
    assert '"theme": "dark"' in (tmp_path / "app.json").read_text()
    window.settings.autostart.click()
    assert ctx.settings.state.value.autostart
    window.settings.theme_buttons["light"].click()


def test_with_the_daemon_down_the_app_says_so_shows_no_stale_green_and_offers_to_start_it(
        window: MainWindow, ctx: AppContext, fake: FakeDaemonClient, qtbot: Any) -> None:
    fake.set_state("alpha", ModelState.READY)
    window.show_page("overview")
    overview = window.overview
    qtbot.waitUntil(lambda: "Ready" in texts(overview.fleet_card))
    assert not overview.daemon_down.isVisible()
    started: list[bool] = []

    async def start_daemon() -> None:
        started.append(True)
        fake.unreachable = False
        await ctx.fleet.resync()

    ctx.start_daemon = start_daemon
    fake.unreachable = True
    ctx.fleet._on_connection(False, "cannot reach the daemon")
    assert overview.daemon_down.isVisible() and "The daemon is not running" in overview.daemon_why.text()
    qtbot.waitUntil(lambda: "Ready" not in texts(overview.fleet_card))  # a state last seen is not shown as live
    assert "Nothing needs your attention" not in texts(overview.attention)
    window.show_page("models")
    qtbot.waitUntil(lambda: "Ready" not in texts(window.models.list))
    assert "Ready" not in window.models.panel.badge.text()

    window.show_page("overview")
    overview.daemon_start.click()
    qtbot.waitUntil(lambda: started == [True] and ctx.fleet.snapshot.value.connected)
    assert not overview.daemon_down.isVisible() and "Ready" in texts(overview.fleet_card)


def test_stopping_a_model_that_is_answering_asks_first(window: MainWindow, ctx: AppContext, fake: FakeDaemonClient,
                                                       qtbot: Any) -> None:
    from daemon.api.models import RouterStats

    fake.set_state("alpha", ModelState.READY)
    fake.router = {"alpha": RouterStats(total=3, in_flight=2)}
    run(qtbot, ctx.fleet.resync())
    window.show_page("models")
    ctx.models.select("alpha")
    panel = window.models.panel
    qtbot.waitUntil(lambda: panel.stop_button.isEnabled())
    asked: list[tuple[str, int]] = []
    answers = [False, True]
    panel.confirm_stop = lambda name, n: asked.append((name, n)) or answers.pop(0)  # type: ignore[method-assign]
    panel.stop_button.click()
    assert asked == [("alpha", 2)] and fake.called("stop_model") == [], "cancelled: nothing stopped"
    panel.stop_button.click()
    qtbot.waitUntil(lambda: len(fake.called("stop_model")) == 1)


@pytest.mark.parametrize("size", [(1280, 800), (1024, 700)])
def test_add_a_model_is_one_obvious_button_that_opens_the_wizard(window: MainWindow, qtbot: Any,
                                                                 size: tuple[int, int]) -> None:
    window.resize(*size)
    window.show_page("models")
    page = window.models
    opened: list[bool] = []
    page.open_wizard = lambda: opened.append(True)
    add = page.get_button
    qtbot.waitUntil(lambda: add.isVisible() and add.width() > 0)
    assert add.text() == "Add a model"
    needed = add.fontMetrics().horizontalAdvance(add.text()) + add.iconSize().width()
    assert add.width() >= needed, f"the button is squeezed to {add.width()} px of {needed}"
    assert add.width() > page.add_button.width(), "the wizard is the obvious way in, the raw form beside it"
    add.click()
    assert opened == [True]
    page.add_button.click()  # the advanced path: a raw definition in the settings form
    assert window.models.panel.settings.editors.get("settings.ctx_size") is not None


def test_at_1024_by_700_the_model_panel_shows_start_stop_and_restart_whole(window: MainWindow, qtbot: Any) -> None:
    window.resize(1024, 700)
    window.show_page("models")
    panel = window.models.panel
    qtbot.waitUntil(lambda: panel.start_button.isVisible())
    # No page asks more than the window has (a window forced narrower than its minimum, as a window
    # manager may, clips the right of the page: Start, Stop and Restart first).
    assert window.minimumSizeHint().width() <= 1024, window.minimumSizeHint()
    window.layout().activate()
    QApplication.processEvents()
    for b in (panel.start_button, panel.stop_button, panel.restart_button):
        right = b.mapTo(window, b.rect().topRight()).x()
        assert right <= window.width(), f"{b.text()} is cut at the window's edge ({right} > {window.width()})"
        assert b.width() >= b.fontMetrics().horizontalAdvance(b.text()), f"{b.text()} is squeezed"
