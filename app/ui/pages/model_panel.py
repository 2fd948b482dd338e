"""The panel of one model: a header with its state and actions, and tabs Overview / Settings / Logs / Charts /
Benchmarks."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.pages.benchmarks_tab import BenchmarksTab
from app.ui.pages.charts_tab import ChartsTab
from app.ui.pages.logs_tab import LogsTab
from app.ui.pages.settings_editor import SettingsEditor
from app.ui.widgets import Card, StateBadge, button, label, value_form
from app.viewmodels.models_page import ModelsPageViewModel, runtime_badge
from daemon.api.contracts import Backend, Offload
from daemon.api.models import ModelDefinition, ModelState, ModelView

OVERVIEW, SETTINGS, LOGS, CHARTS = range(4)
BENCHMARKS = 4


class RuntimeBadge(QLabel):
    """Which runtime a model runs on, with its pinned version: "llama.cpp", "vLLM 0.8.5"."""

    def __init__(self, definition: ModelDefinition | None = None) -> None:
        super().__init__()
        self.setObjectName("RuntimeBadge")
        self.setProperty("badge", "runtime")
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        if definition is not None:
            self.show_definition(definition)

    def show_definition(self, definition: ModelDefinition) -> None:
        text, tip = runtime_badge(definition)
        self.setText(text)
        self.setToolTip(tip)


def placement_text(backend: str | None, offload: Offload | None) -> str:
    """``Vulkan · Vulkan0 · 19/19 layers on the GPU`` (or ``CPU``): where a running llama.cpp model is."""
    if backend is None:
        return "—"
    label_ = {b.value: b.label for b in Backend}.get(backend, backend)
    if offload is None or offload.layers_total is None:
        return label_
    if not offload.layers_on_gpu:
        return f"{label_} · no layer on a GPU" if backend != "cpu" else "CPU"
    devices = ", ".join(offload.devices)
    return f"{label_} · {devices} · {offload.layers_on_gpu}/{offload.layers_total} layers on the GPU"


class OverviewTab(QWidget):
    FIELDS = (("state", "State"), ("node", "Node"), ("compute", "Computes on"), ("endpoint", "Endpoint"), ("pid", "PID"),
              ("uptime", "Uptime"), ("config", "Config hash"), ("restart", "Restart pending"),
              ("crashes", "Crashes"), ("helpers", "Helper nodes"))

    def __init__(self, models: ModelsPageViewModel, name_of: Callable[[str], str] = lambda node: node[:12]) -> None:
        super().__init__()
        self.models = models
        self._name_of = name_of  # a node's name, for a model across nodes' helpers
        self.view: ModelView | None = None
        self.ticker = QTimer(self)  # the uptime moves on between snapshots
        self.ticker.setInterval(1000)
        self.ticker.timeout.connect(self._show_uptime)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 16, 16, 16)
        form, self.values = value_form(self.FIELDS, "field")
        form.setVerticalSpacing(8)
        self._form = form
        layout.addLayout(form)
        self.error_card = Card("Last error", attention=True)
        self.error = label("", wrap=True, selectable=True, name="LastError")
        self.error_lines = label("", role="code", wrap=True, selectable=True)
        self.error_card.body.addWidget(self.error)
        self.error_card.body.addWidget(self.error_lines)
        layout.addWidget(self.error_card)
        layout.addStretch(1)

    def _show_uptime(self) -> None:
        self.values["uptime"].setText(self.models.uptime(self.view))

    def _tick_while_shown(self) -> None:
        ticking = self.isVisible() and self.view is not None and self.view.status.state == ModelState.READY
        if ticking and not self.ticker.isActive():
            self.ticker.start()
        elif not ticking:
            self.ticker.stop()

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().showEvent(event)
        self._show_uptime()
        self._tick_while_shown()

    def hideEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().hideEvent(event)
        self._tick_while_shown()

    def show_state(self, view: ModelView) -> None:
        self.view = view
        s = view.status
        stalled = s.stalled if s.stalled and s.state == ModelState.READY else None
        slow = s.slow if s.slow and s.state == ModelState.READY else None
        flag = f" · Stalled at {stalled.split(': ', 1)[0]}" if stalled else " · Slow" if slow else ""  # "HH:MM:SS: why"
        self.values["state"].setText(fmt.STATE_TEXT[s.state] + flag)
        self.values["state"].setToolTip(stalled or slow or "")
        self.values["node"].setText(s.node_name or s.node)
        self.values["compute"].setText(placement_text(s.backend, s.offload))
        self._form.setRowVisible(self.values["compute"], s.backend is not None)  # llama.cpp, once it runs
        self.values["endpoint"].setText(s.endpoint or "—")
        self.values["pid"].setText(str(s.pid) if s.pid else "—")
        self._show_uptime()
        self._tick_while_shown()
        config = s.running_config_hash or s.config_hash
        self.values["config"].setText(config or "—")
        self.values["restart"].setText("Yes — settings changed since it started" if s.restart_pending else "No")
        paused = " · automatic restarts paused" if s.restarts_paused else ""
        self.values["crashes"].setText(f"{s.crash_count}{paused}")
        helpers = ", ".join(f"{self._name_of(h.node)} ({h.state})" for h in s.rpc_helpers)
        self.values["helpers"].setText(helpers or "—")
        self._form.setRowVisible(self.values["helpers"], bool(s.rpc_helpers))  # only a model across nodes
        self.error_card.setVisible(bool(s.error))
        self.error.setText(s.error or "")
        self.error_lines.setText("\n".join(s.last_log_lines[-8:]))
        self.error_lines.setVisible(bool(s.last_log_lines))


class ModelPanel(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.model_id: str | None = None
        self.setMinimumWidth(480)  # the settings rows (label with its flag under it, box, unit) fit; 1024 px windows too
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 0, 0, 0)
        head = QHBoxLayout()
        self.title = label("", role="figure")
        self.title.setStyleSheet("font-size: 20px;")
        self.title.setMinimumWidth(80)  # a long name gives way to the badges and the buttons
        self.badge = StateBadge()
        self.runtime_badge = RuntimeBadge()
        self.restart_badge = label("Restart needed")
        self.restart_badge.setProperty("badge", "restart")
        head.addWidget(self.title)
        head.addWidget(self.runtime_badge)
        head.addWidget(self.badge)
        head.addWidget(self.restart_badge)
        head.addStretch(1)
        layout.addLayout(head)
        # Where it runs, then what to do: the buttons on a row of their own beside the path (which
        # gives way), so a long name and its badges never push them out of a 1024 px window.
        actions = QHBoxLayout()
        self.subtitle = label("", muted=True)
        self.subtitle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        actions.addWidget(self.subtitle, 1)
        self.start_button = button("Start", kind="primary", icon="action-start", color="#FFFFFF")
        self.stop_button = button("Stop", icon="action-stop")
        self.restart_button = button("Restart", icon="action-restart")
        for b in (self.start_button, self.stop_button, self.restart_button):
            actions.addWidget(b)
        self.start_button.clicked.connect(lambda: self._act("start_model", "Starting"))
        self.stop_button.clicked.connect(self._stop_clicked)
        self.restart_button.clicked.connect(lambda: self._act("restart_model", "Restarting"))
        layout.addLayout(actions)
        self.tabs = QTabWidget()
        self.overview = OverviewTab(ctx.models, ctx.nodes.name_of)
        self.settings = SettingsEditor(ctx)
        self.logs = LogsTab(ctx)
        self.charts = ChartsTab(ctx)
        self.tabs.addTab(self.overview, "Overview")
        self.tabs.addTab(self.settings, "Settings")
        self.tabs.addTab(self.logs, "Logs")
        self.tabs.addTab(self.charts, "Charts")
        self.benchmarks = BenchmarksTab(ctx)
        self.tabs.addTab(self.benchmarks, "Benchmarks")
        self.tabs.currentChanged.connect(lambda _i: self._follow())
        layout.addWidget(self.tabs, 1)
        self.placeholder = label("Select a model, or add one.", muted=True)
        layout.addWidget(self.placeholder)
        self._set_visible(False)

    def _set_visible(self, on: bool) -> None:
        for w in (self.title, self.runtime_badge, self.badge, self.subtitle, self.tabs, self.start_button, self.stop_button,
                  self.restart_button):
            w.setVisible(on)
        self.restart_badge.setVisible(False)
        self.placeholder.setVisible(not on)

    def _stop_clicked(self) -> None:
        """Stop, after asking when requests are being answered: stopping ends them mid-answer."""
        view = self.ctx.fleet.snapshot.value.model(self.model_id) if self.model_id else None
        stats = self.ctx.fleet.snapshot.value.router.get(view.definition.served_name) if view else None
        busy = stats.in_flight if stats is not None else 0
        if busy and not self.confirm_stop(self.title.text(), busy):
            return
        self._act("stop_model", "Stopping")

    def confirm_stop(self, name: str, in_flight: int) -> bool:
        """Ask before cutting answers off (tests replace it)."""
        from PySide6.QtWidgets import QMessageBox

        answer = QMessageBox.question(
            self, f"Stop {name}?", f"{name} is answering {in_flight} request{'s' if in_flight != 1 else ''} now. "
            "Stopping it ends them mid-answer; their clients get an error.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Yes

    def _act(self, method: str, verb: str) -> None:
        if self.model_id:
            name = self.title.text()
            self.ctx.act(getattr(self.ctx.fleet, method)(self.model_id), f"{verb} {name}")

    def show_model(self, view: ModelView | None) -> None:
        if view is None:
            self.model_id = None
            self._set_visible(False)
            self._follow()
            return
        changed = view.definition.id != self.model_id
        self.model_id = view.definition.id
        self._set_visible(True)
        for index in (OVERVIEW, LOGS, CHARTS, BENCHMARKS):
            self.tabs.setTabEnabled(index, True)
        self.benchmarks.show_model(view.definition.id)
        s = view.status
        self.title.setText(view.definition.served_name)
        self.title.setToolTip(view.definition.served_name)
        self.runtime_badge.show_definition(view.definition)
        snapshot = self.ctx.fleet.snapshot.value
        live = snapshot.connected or not snapshot.loaded
        self.badge.set_state(s.state if live else None, fmt.busy_text(s.busy) if live else None)
        self.restart_badge.setVisible(s.restart_pending)
        self.subtitle.setText(f"{view.definition.model_path}  ·  node {self.ctx.nodes.name_of(view.definition.node)}")
        self.subtitle.setToolTip(self.subtitle.text())
        running = s.state in (ModelState.READY, ModelState.STARTING)
        self.start_button.setEnabled(not running and s.state != ModelState.STOPPING and not s.busy)
        self.start_button.setToolTip(f"It is {s.busy}: the job starts it again when it ends" if s.busy else "")
        self.stop_button.setEnabled(running)
        self.restart_button.setEnabled(s.state in (ModelState.READY, ModelState.FAILED))
        self.overview.show_state(view)
        self.settings.show_view(view)
        if changed:
            self._follow()

    def show_draft(self, draft: ModelDefinition) -> None:
        self.model_id = None
        self._set_visible(True)
        for b in (self.start_button, self.stop_button, self.restart_button, self.badge):
            b.setVisible(False)
        self.title.setText("New model")
        self.runtime_badge.show_definition(draft)
        self.subtitle.setText("Fill in the file and the settings, then Save.")
        self.settings.show_draft(draft)
        for index in (OVERVIEW, LOGS, CHARTS, BENCHMARKS):
            self.tabs.setTabEnabled(index, False)
        self.tabs.setCurrentIndex(SETTINGS)
        self._follow()

    def _follow(self) -> None:
        """Only the visible tab streams: logs and charts stop when not looked at."""
        visible = self.isVisible()
        index = self.tabs.currentIndex()
        self.ctx.logs.follow(self.model_id if visible and index == LOGS else None)
        self.benchmarks.set_active(visible and index == BENCHMARKS)
        if visible and index == CHARTS and self.model_id:
            self.ctx.charts.show(self.model_id)
        else:
            self.ctx.charts.hide()

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().showEvent(event)
        self._follow()

    def hideEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().hideEvent(event)
        self._follow()
