"""Overview: the endpoint to copy, how many models are ready, this machine's load, what needs attention."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.pages.first_run import FirstRunCard
from app.ui.widgets import (
    Card,
    CopyField,
    Gauge,
    StateBadge,
    button,
    label,
    page,
    page_header,
)
from app.viewmodels.fleet import FLEET_STATE_TEXT, FleetSnapshot, HostAlert, host_alerts
from daemon.api.models import HostSnapshot, ModelState, ModelView


def attention(snapshot: FleetSnapshot) -> list[tuple[ModelView, str]]:
    """Models the user should look at, with why: failed, paused restarts, stalled or slow answers, pending
    restarts, and models the daemon unloaded to make room for another (until they start again)."""
    items = []
    for view in snapshot.models:
        s = view.status
        if s.state == ModelState.FAILED:
            why = s.error or "failed without a message"
            if s.restarts_paused:
                why += f" — automatic restarts paused after {s.crash_count} crashes"
            items.append((view, why))
        elif s.restarts_paused:
            items.append((view, f"automatic restarts paused after {s.crash_count} crashes"))
        elif s.stalled:
            items.append((view, f"Stalled — {s.stalled}"))
        elif s.slow and s.state == ModelState.READY:
            items.append((view, f"Slow — {s.slow}"))
        elif s.restart_pending:
            items.append((view, "settings changed: restart to apply them"))
        elif s.evicted and s.state == ModelState.STOPPED:
            items.append((view, s.evicted[:1].upper() + s.evicted[1:]))
    return items


class OverviewPage(QScrollArea):
    def __init__(self, ctx: AppContext, open_model: Callable[[str], None]) -> None:
        super().__init__()
        self.ctx = ctx
        self._open_model = open_model
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Overview", "One OpenAI-compatible endpoint for every model you run."))
        self.first_run = FirstRunCard(ctx)  # shown only while the daemon has no model
        layout.addWidget(self.first_run)

        endpoint = Card("Endpoint")
        self.url = CopyField()
        self.url.setObjectName("EndpointUrl")
        self.endpoint_note = label("", muted=True, wrap=True)
        endpoint.body.addWidget(self.url)
        endpoint.body.addWidget(self.endpoint_note)
        self.endpoint_start = button("Start the daemon", kind="flat", name="EndpointStartDaemon",
                                     on_click=self._start_daemon)
        self.endpoint_start.setVisible(False)
        endpoint.body.addWidget(self.endpoint_start, 0, Qt.AlignmentFlag.AlignLeft)
        self.keys_warning = label("", wrap=True, selectable=True)  # keys at rest: 0600 files, no keychain
        self.keys_warning.setObjectName("KeysAtRestWarning")
        self.keys_warning.setVisible(False)
        endpoint.body.addWidget(self.keys_warning)
        self.keys_dismiss = button("Don't show again", kind="flat", name="KeysAtRestDismiss")
        self.keys_dismiss.setToolTip("The Nodes page still says it for this machine.")
        self.keys_dismiss.clicked.connect(self._dismiss_keys_warning)
        self.keys_dismiss.setVisible(False)
        endpoint.body.addWidget(self.keys_dismiss, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(endpoint)

        counts = QHBoxLayout()
        counts.setSpacing(12)
        self.figures: dict[str, QLabel] = {}
        for key, title in (("ready", "Ready"), ("starting", "Starting"), ("failed", "Failed"), ("stopped", "Stopped")):
            card = Card(title)
            figure = label("0", role="figure")
            figure.setObjectName(f"count-{key}")
            figure.setProperty("state", key)
            card.body.addWidget(figure)
            self.figures[key] = figure
            counts.addWidget(card)
        layout.addLayout(counts)

        row = QHBoxLayout()
        row.setSpacing(12)
        self.machine = Card("This machine")
        self.gauges = QVBoxLayout()
        self.gauges.setSpacing(10)
        self.machine.body.addLayout(self.gauges)
        self.machine.body.addStretch(1)
        self._gauge_widgets: dict[str, Gauge] = {}
        self.attention = Card("Needs attention")
        self.daemon_down = QWidget()
        self.daemon_down.setObjectName("attention-daemon")
        down = QVBoxLayout(self.daemon_down)
        down.setContentsMargins(0, 4, 0, 4)
        self.daemon_why = label("", wrap=True, selectable=True)
        self.daemon_start = button("Start the daemon", kind="primary", name="StartDaemon", on_click=self._start_daemon)
        down.addWidget(self.daemon_why)
        down.addWidget(self.daemon_start, 0, Qt.AlignmentFlag.AlignLeft)
        self.daemon_down.setVisible(False)
        self.attention.body.addWidget(self.daemon_down)
        self.attention_rows = QVBoxLayout()
        self.attention.body.addLayout(self.attention_rows)
        self.attention.body.addStretch(1)
        row.addWidget(self.machine, 1)
        row.addWidget(self.attention, 1)
        layout.addLayout(row)
        self.fleet_card = Card("Models")
        self.fleet_rows = QGridLayout()
        self.fleet_rows.setHorizontalSpacing(18)
        self.fleet_rows.setVerticalSpacing(6)
        self.fleet_card.body.addLayout(self.fleet_rows)
        layout.addWidget(self.fleet_card)
        layout.addStretch(1)
        ctx.fleet.snapshot.subscribe(self.show_state, now=True)

    def show_state(self, snap: FleetSnapshot) -> None:
        self.url.set_value(snap.api_url)
        if snap.connected:
            keys = "API keys are required." if snap.keys_required else "No API key needed on this machine."
            self.endpoint_note.setText(f"Any OpenAI client can use this base URL. {keys} "
                                       f"Status: {FLEET_STATE_TEXT[snap.state]}.")
        elif not snap.loaded and not snap.error:
            self.endpoint_note.setText("Connecting to the daemon…")
        else:
            self.endpoint_note.setText(f"The daemon does not answer{': ' + snap.error if snap.error else ''}. "
                                       "The app keeps trying" + (", or start it now." if self.ctx.start_daemon
                                                                 else "."))
        self._render_keys_warning(snap.keys_warning)
        self.figures["ready"].setText(str(snap.count(ModelState.READY)))
        self.figures["starting"].setText(str(snap.count(ModelState.STARTING, ModelState.STOPPING)))
        self.figures["failed"].setText(str(snap.count(ModelState.FAILED)))
        self.figures["stopped"].setText(str(snap.count(ModelState.STOPPED)))
        self._render_host(snap.local_host)
        down = snap.loaded and not snap.connected or bool(snap.error)
        self._render_daemon_down(snap, down)
        self._render_attention([] if down else attention(snap), down, [] if down else host_alerts(snap.hosts))
        self._render_fleet(snap)

    def _render_fleet(self, snap: FleetSnapshot) -> None:
        _clear(self.fleet_rows)
        live = snap.connected or not snap.loaded  # else the states are as last seen: shown as unknown
        heads = ("Model", "State", "Node", "Uptime", "Requests", "In flight", "")
        for col, text in enumerate(heads):
            self.fleet_rows.addWidget(label(text, muted=True), 0, col)
        for row, view in enumerate(snap.models, 1):
            d, s = view.definition, view.status
            stats = snap.router.get(d.served_name) or snap.router.get(d.id)
            name = label(d.served_name)
            name.setStyleSheet("font-weight: 600;")
            self.fleet_rows.addWidget(name, row, 0)
            badge = StateBadge(s.state if live else None)  # stale: unknown
            if live and s.busy:
                badge.set_state(s.state, fmt.busy_text(s.busy))  # a job holds it: "Tuning"
            self.fleet_rows.addWidget(badge, row, 1)
            self.fleet_rows.addWidget(label(s.node_name or s.node), row, 2)
            self.fleet_rows.addWidget(label(fmt.uptime(s.started_at) if s.state == ModelState.READY else "—"), row, 3)
            self.fleet_rows.addWidget(label(f"{stats.total:,}" if stats else "—"), row, 4)
            self.fleet_rows.addWidget(label(str(stats.in_flight) if stats else "—"), row, 5)
            open_button = button("Open", kind="flat", on_click=lambda _=False, mid=d.id: self._open_model(mid))
            self.fleet_rows.addWidget(open_button, row, 6)
        self.fleet_rows.setColumnStretch(0, 1)
        if not snap.models:
            self.fleet_rows.addWidget(label("No models yet: add one on the Models page.", muted=True), 1, 0, 1, 7)

    def _gauge(self, key: str, title: str) -> Gauge:
        if key not in self._gauge_widgets:
            gauge = Gauge(title)
            gauge.setObjectName(f"gauge-{key}")
            self._gauge_widgets[key] = gauge
            self.gauges.addWidget(gauge)
        return self._gauge_widgets[key]

    def _render_keys_warning(self, warning: str | None) -> None:
        """Said until dismissed; a new warning (other keys, another reason) is said again."""
        shown = warning if warning and warning != self.ctx.settings.state.value.prefs.dismissed_keys_warning else ""
        self.keys_warning.setText(f"⚠ {shown}" if shown else "")
        self.keys_warning.setVisible(bool(shown))
        self.keys_dismiss.setVisible(bool(shown))

    def _dismiss_keys_warning(self) -> None:
        warning = self.ctx.fleet.snapshot.value.keys_warning
        if warning:
            self.ctx.settings.dismiss_keys_warning(warning)
        self._render_keys_warning(warning)

    def _render_host(self, host: HostSnapshot | None) -> None:
        if host is None:
            self._gauge("cpu", "CPU").set_value(None, "—")
            return
        cpu = host.cpu_percent
        self._gauge("cpu", "CPU").set_value(None if cpu is None else cpu / 100, fmt.percent(cpu))
        total, used = host.memory_total, host.memory_used
        self._gauge("mem", "Memory").set_value(used / total if total and used is not None else None,
                                               f"{fmt.size(used)} of {fmt.size(total)}")
        for gpu in host.gpus:
            mem = self._gauge(f"gpu{gpu.index}-mem", f"GPU {gpu.index} memory · {gpu.name}")
            mem.set_value(gpu.memory_used / gpu.memory_total if gpu.memory_total else None,
                          f"{fmt.size(gpu.memory_used)} of {fmt.size(gpu.memory_total)}")
            util = self._gauge(f"gpu{gpu.index}-util", f"GPU {gpu.index} utilisation")
            util.set_value(None if gpu.utilization_percent is None else gpu.utilization_percent / 100,
                           fmt.percent(gpu.utilization_percent))

    def _render_daemon_down(self, snap: FleetSnapshot, down: bool) -> None:
        """The daemon does not answer: said first under Needs attention, with the way back."""
        self.daemon_down.setVisible(down)
        self.endpoint_start.setVisible(down and self.ctx.start_daemon is not None)
        self.daemon_start.setVisible(down and self.ctx.start_daemon is not None)
        if down:
            self.daemon_why.setText(f"The daemon is not running{': ' + snap.error if snap.error else ''}. "
                                    "Models and states shown are as they were when it was last seen."
                                    + ("" if self.ctx.start_daemon is not None else
                                       " Start it with `mirbadllm daemon`."))

    def _start_daemon(self) -> None:
        if self.ctx.start_daemon is not None:
            self.ctx.act(self.ctx.start_daemon(), "The daemon is running again")

    def _render_attention(self, items: list[tuple[ModelView, str]], daemon_down: bool = False,
                          hosts: list[HostAlert] | None = None) -> None:
        _clear(self.attention_rows)
        if not items and not hosts:
            if not daemon_down:
                self.attention_rows.addWidget(label("Nothing needs your attention.", muted=True))
            return
        for alert in hosts or []:  # the machines first: a node down explains its models
            row = QWidget()
            row.setObjectName(f"attention-host-{alert.key.split(':')[0]}")
            box = QVBoxLayout(row)
            box.setContentsMargins(0, 4, 0, 4)
            title = label(f"⚠ {alert.title}", wrap=True)
            title.setStyleSheet("font-weight: 600;")
            box.addWidget(title)
            box.addWidget(label(alert.what_to_do, muted=True, wrap=True, selectable=True))
            self.attention_rows.addWidget(row)
        for view, why in items:
            row = QWidget()
            row.setObjectName(f"attention-{view.definition.id}")
            grid = QGridLayout(row)
            grid.setContentsMargins(0, 4, 0, 4)
            name = label(view.definition.served_name)
            name.setStyleSheet("font-weight: 600;")
            grid.addWidget(name, 0, 0)
            grid.addWidget(StateBadge(view.status.state), 0, 1)
            open_button = button("Open", kind="flat",
                                 on_click=lambda _=False, mid=view.definition.id: self._open_model(mid))
            grid.addWidget(open_button, 0, 2)
            grid.addWidget(label(why, muted=True, wrap=True, selectable=True), 1, 0, 1, 3)
            grid.setColumnStretch(0, 1)
            self.attention_rows.addWidget(row)


def _clear(layout: QGridLayout | QVBoxLayout) -> None:
    while layout.count():
        child = layout.takeAt(0)
        if child.widget():
            child.widget().deleteLater()
