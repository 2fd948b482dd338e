"""Widgets offscreen (pytest-qt) over the real daemon: pages render, the tray acts, editors validate.

One daemon for the module (no local agent) with two nodes: "workstation", whose made-up GPU is an
RTX 4070 and whose runtime is the fake llama-server (it fails to load a model run with
``--threads 3``, and logs each request), and "cpu-box", without a GPU, whose runtime takes a
streamed request and never answers it (a model busy with long prompts)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PySide6.QtCore import QEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QTableWidget,
)
from real_daemon import (
    RealDaemon,
    ask,
    chat,
    daemon_in_thread,
    daemon_with_workstation,
    fresh,
    on_workstation,
    plant_history,
)

from agent.api.models import GpuInfo
from app import format as fmt
from app.context import AppContext
from app.ui import theme
from app.ui.dialogs import NewKeyDialog
from app.ui.main_window import MainWindow
from app.ui.pages.model_panel import CHARTS, LOGS, SETTINGS
from app.ui.tray import TrayController
from app.viewmodels.fleet import FleetState
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import DaemonSettings, ModelDefinition, ModelState
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes
from tests.fakes.ports import free_port_block

pytestmark = pytest.mark.gui
GIB = 1 << 30
RTX_4070 = GpuInfo(index=0, name="NVIDIA RTX 4070", memory_total=12 * GIB, memory_used=5 * GIB,
                   utilization_percent=42.0)
FAILS = {"threads": 3}  # settings the workstation's runtime fails to load a model with
FAILED_TO_LOAD = "llama-server exited 1: main: exiting due to model loading error"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    root = tmp_path_factory.mktemp("gui")
    with daemon_with_workstation(root, [RTX_4070], fail_when="--threads 3", log_requests=True,
                                 log_bodies=True) as found:
        found.cpu_box = found.add_node(  # type: ignore[attr-defined]
            "cpu-box", llama_server=write_fake_runtime(root / "cpu-runtime", prompt_wedged=True))
        yield found


def models(daemon: RealDaemon, *more: ModelDefinition, beta_fails: bool = False) -> list[ModelDefinition]:
    """The daemon's models: alpha and beta ("Beta-7B") on the workstation, stopped, and ``more``."""
    beta = on_workstation(daemon, "beta", served_name="Beta-7B", tags=["code", "chat"],
                          settings=FAILS if beta_fails else {})
    return fresh(daemon, on_workstation(daemon, "alpha", tags=["chat"]), beta, *more)


@pytest.fixture
def client(daemon: RealDaemon) -> DaemonClient:
    """The app's client of the module's daemon, reset to alpha and beta."""
    models(daemon)
    return DaemonClient(*daemon, client_name="app")


@pytest.fixture
def ctx(client: DaemonClient, qloop: asyncio.AbstractEventLoop, qapp: QApplication, qtbot: Any,
        tmp_path: Path) -> Iterator[AppContext]:
    if theme.current_name() != "light" or not qapp.styleSheet():
        theme.apply(qapp, "light")
    context = AppContext.create(client, tmp_path, prefs_path=tmp_path / "app.json", platform="linux",
                                host_refresh_s=3600)
    context.fleet.feed._poll_timeout = 5
    context.start()
    qtbot.waitUntil(lambda: context.fleet.snapshot.value.loaded and context.nodes.state.value.loaded)
    yield context
    closing = asyncio.ensure_future(context.close())  # its feeds end, then its session
    qtbot.waitUntil(closing.done, timeout=10_000)
    context.nodes.close()
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


def state(daemon: RealDaemon, model_id: str) -> ModelState:
    """The model's state as the daemon reports it."""
    return ask(daemon, lambda c: c.get_model(model_id)).status.state


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
    qtbot.waitUntil(task.done, timeout=30_000)
    return task.result()


def test_every_page_renders_with_data(window: MainWindow, daemon: RealDaemon, client: DaemonClient,
                                      qtbot: Any) -> None:
    models(daemon, beta_fails=True)
    run(qtbot, client.start_model("alpha", wait=True))
    assert run(qtbot, client.start_model("beta", wait=True)).state == ModelState.FAILED
    api_url = f"{daemon[0]}/v1"
    qtbot.waitUntil(lambda: window.overview.figures["failed"].text() == "1")
    overview = texts(window.overview)
    assert api_url in overview and FAILED_TO_LOAD in overview
    host = window.ctx.fleet.snapshot.value.local_host
    assert host is not None and host.node_name == "workstation"
    assert "NVIDIA RTX 4070" in overview and "5.0 GiB of 12.0 GiB" in overview  # the GPU its agent reports
    assert f"of {fmt.size(host.memory_total)}" in overview  # and its memory
    window.show_page("models")
    assert window.models.list.count() == 2 and window.models.panel.title.text() == "alpha"
    window.show_page("playground")
    assert window.playground.model.currentText() == "alpha"
    window.show_page("access")
    qtbot.waitUntil(lambda: api_url in window.access.connect_card.text.toPlainText())
    window.show_page("settings")
    assert window.settings.theme_buttons["system"].isChecked()
    for key in ("overview", "models", "playground", "access", "settings"):
        window.show_page(key)
        assert not window.grab().isNull()
    assert window.stack.currentWidget() is window.settings


def test_tray_reflects_the_fleet_and_its_actions_call_the_daemon(ctx: AppContext, daemon: RealDaemon,
                                                                  client: DaemonClient, qtbot: Any,
                                                                  qapp: QApplication) -> None:
    models(daemon, beta_fails=True)
    quits: list[str] = []
    tray = TrayController(ctx, open_window=lambda: quits.append("open"), quit_app=lambda: quits.append("quit"),
                          stop_all_and_quit=lambda: quits.append("stop-all"))
    qtbot.waitUntil(lambda: ctx.fleet.snapshot.value.model("alpha") is not None)
    assert tray.state == FleetState.IDLE
    tray.rebuild_menu()
    start = tray.action("tray-model-alpha")
    assert start is not None and "alpha — Stopped" in start.text() and "Start" in start.text()
    start.trigger()
    qtbot.waitUntil(lambda: tray.state == FleetState.STARTING)  # at once, from the daemon's answer
    qtbot.waitUntil(lambda: tray.state == FleetState.READY, timeout=30_000)
    assert state(daemon, "alpha") == ModelState.READY
    assert "1 of 2 models ready" in tray.icon.toolTip()
    assert [n.title for n in tray.notified] == ["alpha is ready"]
    tray.menu.aboutToShow.emit()  # the menu is rebuilt when it opens
    stop = tray.action("tray-model-alpha")
    assert stop is not None and "Ready" in stop.text() and "Stop" in stop.text()
    stop.trigger()
    qtbot.waitUntil(lambda: tray.state == FleetState.IDLE, timeout=30_000)
    assert state(daemon, "alpha") == ModelState.STOPPED
    run(qtbot, client.start_model("beta", wait=True))  # its runtime cannot load it
    qtbot.waitUntil(lambda: tray.state == FleetState.FAILED, timeout=30_000)
    assert "failed" in tray.icon.toolTip() and tray.notified[-1].failed
    tray.action("tray-copy-url").trigger()  # type: ignore[union-attr]
    assert qapp.clipboard().text() == f"{daemon[0]}/v1"
    for name in ("tray-open", "tray-quit", "tray-stop-all"):
        tray.action(name).trigger()  # type: ignore[union-attr]
    assert quits == ["open", "quit", "stop-all"]


def test_the_tray_says_when_the_daemon_is_not_running(qloop: asyncio.AbstractEventLoop, qtbot: Any,
                                                      tmp_path: Path) -> None:
    gone = DaemonClient(f"http://127.0.0.1:{free_port_block(1)}", "no-daemon-here", client_name="app")
    context = AppContext.create(gone, tmp_path, prefs_path=tmp_path / "app.json", platform="linux",
                                host_refresh_s=3600)
    context.fleet.feed._retry_delays = (0.05,)
    tray = TrayController(context, open_window=lambda: None, quit_app=lambda: None, stop_all_and_quit=lambda: None)
    context.start()
    try:
        qtbot.waitUntil(lambda: "unreachable" in tray.icon.toolTip(), timeout=10_000)  # once it has tried
        assert tray.state == FleetState.UNREACHABLE and "cannot reach the daemon" in tray.icon.toolTip()
    finally:
        closing = asyncio.ensure_future(context.close())
        qtbot.waitUntil(closing.done, timeout=10_000)
        context.nodes.close()


def test_settings_editor_blocks_bad_values_with_a_message(window: MainWindow, daemon: RealDaemon,
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
    qtbot.waitUntil(lambda: ask(daemon, lambda c: c.get_model("alpha")).definition.settings.ctx_size == 4096)
    assert [v.definition.id for v in ask(daemon, lambda c: c.list_models())] == ["alpha", "beta"], "nothing added"


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


def test_saving_a_running_model_shows_restart_needed(window: MainWindow, ctx: AppContext, daemon: RealDaemon,
                                                     qtbot: Any) -> None:
    run(qtbot, ctx.fleet.start_model("alpha"))
    first = ask(daemon, lambda c: c.start_model("alpha", wait=True))
    window.show_page("models")
    editor = window.models.panel.settings
    window.models.panel.tabs.setCurrentIndex(SETTINGS)
    assert not editor.restart_note.isVisible()
    editor.editors["settings.parallel"].setText("4")  # type: ignore[attr-defined]
    editor.save_button.click()
    qtbot.waitUntil(lambda: editor.restart_note.isVisible())
    assert window.models.panel.restart_badge.isVisible()
    assert ask(daemon, lambda c: c.get_model("alpha")).status.restart_pending
    editor.restart_now.click()

    def restarted() -> bool:
        now = ask(daemon, lambda c: c.get_model("alpha")).status
        return now.state == ModelState.READY and now.pid != first.pid and not now.restart_pending

    qtbot.waitUntil(restarted, timeout=30_000)
    qtbot.waitUntil(lambda: not window.models.panel.restart_badge.isVisible(), timeout=10_000)


def test_add_duplicate_and_delete_a_model(window: MainWindow, ctx: AppContext, daemon: RealDaemon,
                                          qtbot: Any) -> None:
    window.show_page("models")
    window.models.add_button.click()
    editor = window.models.panel.settings
    assert editor.form is not None and editor.form.is_new
    editor.editors["id"].setText("Not Valid")  # type: ignore[attr-defined]
    assert "lowercase letters" in editor.errors["id"].text() and not editor.save_button.isEnabled()
    editor.editors["id"].setText("gamma")  # type: ignore[attr-defined]
    editor.editors["served_name"].setText("Gamma")  # type: ignore[attr-defined]
    editor.editors["model_path"].setText(str(daemon.gguf))  # type: ignore[attr-defined]
    node = editor.editors["node"]  # this daemon has no local node: the workstation
    if isinstance(node, QComboBox):
        node.setCurrentIndex(node.findData(daemon.workstation))  # type: ignore[attr-defined]
    else:
        node.setText(daemon.workstation)  # type: ignore[attr-defined]
    editor.save_button.click()
    qtbot.waitUntil(lambda: window.models.list.count() == 3)
    saved = ask(daemon, lambda c: c.get_model("gamma")).definition
    assert saved.served_name == "Gamma" and saved.node == daemon.workstation  # type: ignore[attr-defined]
    qtbot.waitUntil(lambda: window.models.panel.title.text() == "Gamma")
    editor.duplicate_button.click()
    assert editor.form.is_new and editor.form.values["id"] == "gamma-copy"
    window.models.select("alpha")
    editor.confirm = lambda _parent, text: "alpha" in text
    editor.delete_button.click()
    qtbot.waitUntil(lambda: window.models.list.count() == 2)
    assert sorted(v.definition.id for v in ask(daemon, lambda c: c.list_models())) == ["beta", "gamma"]


def test_api_key_is_shown_once_and_never_listed(window: MainWindow, daemon: RealDaemon, qtbot: Any) -> None:
    window.show_page("access")
    page = window.access
    page.ask_name = lambda _parent: "laptop"
    page.create_button.click()
    qtbot.waitUntil(lambda: any(isinstance(w, NewKeyDialog) and w.isVisible() for w in QApplication.topLevelWidgets()))
    dialog = next(w for w in QApplication.topLevelWidgets() if isinstance(w, NewKeyDialog) and w.isVisible())
    secret = dialog.field.edit.text()
    [key] = daemon.call(lambda deps: deps.keys.list())
    assert key.name == "laptop" and secret.startswith("sk-mirbad-") and secret.startswith(key.prefix)
    assert daemon.call(lambda deps: deps.keys.verify(secret)) is not None, "the daemon takes the key shown"
    dialog.field.copy()
    assert QApplication.clipboard().text() == secret
    dialog.close()
    assert dialog.field.edit.text() == "", "the secret leaves with the dialog"
    qtbot.waitUntil(lambda: page.table.rowCount() == 1)
    listed = texts(window)
    assert "laptop" in listed and secret[:14] in listed and secret not in listed
    page.findChild(type(page.create_button), f"revoke-{key.id}").click()
    qtbot.waitUntil(lambda: page.table.rowCount() == 0)
    assert daemon.call(lambda deps: deps.keys.list()) == [], "revoked on the daemon"


def test_lan_access_says_keys_are_needed_and_sets_them(window: MainWindow, daemon: RealDaemon,
                                                       qtbot: Any) -> None:
    daemon.call(lambda deps: deps.keys.create("editor"))  # LAN access needs a key
    window.show_page("access")
    page = window.access
    assert "turns on required API keys" in page.lan_note.text()
    page.lan.click()

    def saved() -> DaemonSettings | None:
        try:
            return ask(daemon, lambda c: c.get_settings())
        except DaemonError:  # a moment while it moves to the LAN's address
            return None

    qtbot.waitUntil(lambda: (now := saved()) is not None and now.lan_access, timeout=10_000)
    assert saved().require_api_keys  # type: ignore[union-attr]
    qtbot.waitUntil(lambda: page.require.isChecked() and not page.require.isEnabled())
    qtbot.waitUntil(lambda: 'apiKey: "YOUR_API_KEY"' in page.connect_card.text.toPlainText())


def test_logs_follow_and_search(window: MainWindow, client: DaemonClient, daemon: RealDaemon, qtbot: Any) -> None:
    run(qtbot, client.start_model("alpha", wait=True))
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(LOGS)
    text = panel.logs.text
    qtbot.waitUntil(lambda: "server is listening" in text.toPlainText(), timeout=10_000)
    before = text.toPlainText().count("processing task")  # the agent's first look at the runtime
    chat(daemon, "alpha")  # the runtime logs the request
    qtbot.waitUntil(lambda: text.toPlainText().count("processing task") == before + 1, timeout=10_000)
    panel.logs.search.setText("loading model")
    found = text.toPlainText().splitlines()  # this run's line and those of its earlier runs
    assert found and set(found) == {f"llama_model_loader: loading model from {daemon.gguf}"}  # type: ignore[attr-defined]
    panel.tabs.setCurrentIndex(0)
    assert window.findChild(QPlainTextEdit, "LogText") is not None


def test_the_log_opens_at_the_newest_line_read_from_its_start(window: MainWindow, client: DaemonClient,
                                                              daemon: RealDaemon, qtbot: Any) -> None:
    run(qtbot, client.start_model("alpha", wait=True))
    for n in range(40):  # the runtime logs two lines a request: more than the view holds
        chat(daemon, "alpha", f"line {n}")
    chat(daemon, "alpha", "Content-only " + "x" * 600)  # its body is logged on one wide line
    window.show_page("models")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(LOGS)
    text = panel.logs.text
    qtbot.waitUntil(lambda: "Content-only" in text.toPlainText(), timeout=10_000)
    assert text.horizontalScrollBar().maximum() > 0, "the long line is wider than the view"
    assert text.horizontalScrollBar().value() == 0, "not scrolled to the right"
    rows = text.verticalScrollBar()
    assert rows.maximum() > 0, "more lines than the view holds"
    assert rows.value() >= rows.maximum() - 1, "at the newest line (the horizontal bar, once shown, takes one)"


def test_charts_draw_the_history(window: MainWindow, daemon: RealDaemon, qtbot: Any) -> None:
    models(daemon, on_workstation(daemon, "charted"))
    plant_history(daemon, "charted", [{"gen_tps": float(i), "rss_bytes": 2.0**30} for i in range(120)])
    run(qtbot, window.ctx.fleet.resync())  # the models as the daemon now holds them
    window.show_page("models")
    qtbot.waitUntil(lambda: window.models.list.count() == 3)
    window.models.select("charted")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(CHARTS)
    charts = {chart.title: chart for chart in panel.charts.charts}
    # Real values are drawn, not timestamps of NaN: every point of the series the history holds.
    qtbot.waitUntil(lambda: charts["Tokens per second"].finite == (120, 0), timeout=10_000)
    assert charts["Process memory"].finite == (120,) and charts["KV cache use"].finite == (0,)
    assert "now 119.0 tok/s" in panel.charts.status.text()
    assert charts["GPU memory"].message is None, "this node has a GPU: its charts are drawn"
    daemon.call(lambda deps: deps.history.maintain())  # the minutes rolled up, as the daemon does
    panel.charts.range_buttons.buttons()[2].click()
    qtbot.waitUntil(lambda: window.ctx.charts.state.value.range == "24h")
    qtbot.waitUntil(lambda: 0 < charts["Tokens per second"].finite[0] < 120, timeout=10_000)  # a point a minute


def test_on_a_node_without_a_gpu_the_gpu_charts_say_so(window: MainWindow, daemon: RealDaemon, qtbot: Any) -> None:
    models(daemon, on_workstation(daemon, "on-cpu", node=daemon.cpu_box))  # type: ignore[attr-defined]
    plant_history(daemon, "on-cpu", [{"gen_tps": 1.0, "gpu_mem_bytes": None} for _ in range(3)])
    run(qtbot, window.ctx.fleet.resync())  # the models as the daemon now holds them
    window.show_page("models")
    qtbot.waitUntil(lambda: window.models.list.count() == 3)
    window.models.select("on-cpu")
    panel = window.models.panel
    panel.tabs.setCurrentIndex(CHARTS)
    charts = {chart.title: chart for chart in panel.charts.charts}
    qtbot.waitUntil(lambda: charts["GPU memory"].message == "No GPU on this node", timeout=10_000)
    assert charts["GPU utilisation"].message == "No GPU on this node"
    assert charts["GPU memory"].notice.isVisible() and "No GPU on this node" in charts["GPU memory"].notice.text()
    qtbot.waitUntil(lambda: charts["Tokens per second"].finite == (3, 0), timeout=10_000)
    assert charts["Tokens per second"].message is None


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
        open_main_window: Any, qtbot: Any, tmp_path: Path) -> None:
    """A daemon of its own (with its local agent and the fake llama-server) that stops and starts again
    on its port; the app's client is the same throughout."""
    (tmp_path / "alpha.gguf").write_bytes(gguf_bytes())
    runtime, home, port = write_fake_runtime(tmp_path / "runtime"), tmp_path / "home", free_port_block(1)
    alpha = ModelDefinition(id="alpha", served_name="alpha", model_path=str(tmp_path / "alpha.gguf"), node="local")
    daemons = ExitStack()
    try:
        first = daemons.enter_context(daemon_in_thread(home, runtime, port=port))
        first.call(lambda deps: deps.registry.add(alpha))
        ask(first, lambda c: c.start_model("alpha", wait=True))
        window = open_main_window(DaemonClient(*first, client_name="app"), size=(1280, 800))
        ctx = window.ctx
        ctx.fleet.feed._retry_delays = (0.05,)
        window.show_page("overview")
        overview = window.overview
        qtbot.waitUntil(lambda: "Ready" in texts(overview.fleet_card))
        assert not overview.daemon_down.isVisible()
        started: list[RealDaemon] = []

        async def start_daemon() -> None:
            again = daemons.enter_context(daemon_in_thread(home, runtime, port=port))  # its home: alpha, the token
            ask(again, lambda c: c.start_model("alpha", wait=True))
            started.append(again)
            await ctx.fleet.resync()

        ctx.start_daemon = start_daemon
        daemons.close()  # the daemon stops (its models with it)
        qtbot.waitUntil(lambda: overview.daemon_down.isVisible(), timeout=15_000)
        assert "The daemon is not running" in overview.daemon_why.text()
        qtbot.waitUntil(lambda: "Ready" not in texts(overview.fleet_card))  # a state last seen is not shown as live
        assert "Nothing needs your attention" not in texts(overview.attention)
        window.show_page("models")
        qtbot.waitUntil(lambda: "Ready" not in texts(window.models.list))
        assert "Ready" not in window.models.panel.badge.text()

        window.show_page("overview")
        overview.daemon_start.click()
        qtbot.waitUntil(lambda: len(started) == 1 and ctx.fleet.snapshot.value.connected, timeout=60_000)
        qtbot.waitUntil(lambda: not overview.daemon_down.isVisible() and "Ready" in texts(overview.fleet_card),
                        timeout=10_000)
    finally:
        daemons.close()


def test_stopping_a_model_that_is_answering_asks_first(window: MainWindow, ctx: AppContext, daemon: RealDaemon,
                                                       client: DaemonClient, qtbot: Any) -> None:
    models(daemon, on_workstation(daemon, "busy", node=daemon.cpu_box))  # type: ignore[attr-defined]
    run(qtbot, ctx.fleet.resync())  # the models as the daemon now holds them
    run(qtbot, client.start_model("busy", wait=True))

    async def stream(_deps: Any) -> None:  # its runtime reads the prompt and never answers
        try:
            async with aiohttp.ClientSession() as session, session.post(
                    f"{daemon[0]}/v1/chat/completions", json={"model": "busy", "stream": True, "messages": [
                        {"role": "user", "content": "a long prompt"}]}) as answer:
                await answer.read()
        except aiohttp.ClientError:
            pass  # cut when the model stops

    daemon.call(lambda _deps: [asyncio.ensure_future(stream(_deps)) for _ in range(2)])

    def in_flight() -> int:
        run(qtbot, ctx.fleet.resync())
        stats = ctx.fleet.snapshot.value.router.get("busy")
        return stats.in_flight if stats else 0

    qtbot.waitUntil(lambda: in_flight() == 2, timeout=10_000)
    window.show_page("models")
    ctx.models.select("busy")
    panel = window.models.panel
    qtbot.waitUntil(lambda: panel.stop_button.isEnabled())
    asked: list[tuple[str, int]] = []
    answers = [False, True]
    panel.confirm_stop = lambda name, n: asked.append((name, n)) or answers.pop(0)  # type: ignore[method-assign]
    panel.stop_button.click()
    assert asked == [("busy", 2)]
    assert state(daemon, "busy") == ModelState.READY, "cancelled: nothing stopped"
    panel.stop_button.click()
    qtbot.waitUntil(lambda: state(daemon, "busy") == ModelState.STOPPED, timeout=30_000)


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
