"""The Settings page's daemon observability: tracing (OpenTelemetry) edited and saved to the daemon,
and where Prometheus scrapes it, as a copyable ``prometheus.yml`` job."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QPlainTextEdit,
)

from app.context import AppContext
from app.ui.widgets import Card, CopyField, button, label, line_edit
from app.viewmodels.fleet import FleetSnapshot
from app.viewmodels.observability import (
    RESTART_NOTE,
    ObservabilityViewModel,
    TracingState,
    daemon_base,
    prometheus_snippet,
    token_file,
)
from daemon.api.models import TracingSettings


class TracingCard(Card):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__("Tracing")
        self.ctx = ctx
        self.vm = ObservabilityViewModel(ctx.fleet)
        self.body.addWidget(label("Send a trace of each /v1 request (admission, queue, the runtime's answer, the "
                                  "stream) to an OpenTelemetry collector over OTLP/HTTP; the runtime is sent its "
                                  "traceparent. Off: nothing is traced or sent.", muted=True, wrap=True))
        self.enabled = QCheckBox("Trace /v1 requests")
        self.enabled.setObjectName("TracingEnabled")
        self.body.addWidget(self.enabled)
        form = QFormLayout()
        self.endpoint = line_edit("http://127.0.0.1:4318/v1/traces", name="TracingEndpoint")
        self.service = line_edit("mirbadllm-daemon", name="TracingService")
        self.ratio = line_edit("1.0", name="TracingRatio")
        self.ratio.setToolTip("Share of new requests traced, 0 to 1; a request that arrives with a traceparent "
                              "follows its caller's choice.")
        form.addRow(label("OTLP endpoint", muted=True), self.endpoint)
        form.addRow(label("Service name", muted=True), self.service)
        form.addRow(label("Sample ratio", muted=True), self.ratio)
        self.body.addLayout(form)
        row = QHBoxLayout()
        self.save = button("Save", kind="primary", name="TracingSave", on_click=self._save)
        row.addWidget(self.save)
        row.addStretch(1)
        self.body.addLayout(row)
        self.error = label("", role="error", wrap=True, selectable=True, name="TracingError")
        self.error.setVisible(False)
        self.body.addWidget(self.error)
        self.note = label(RESTART_NOTE, muted=True, wrap=True, name="TracingNote")
        self.body.addWidget(self.note)
        self._shown: TracingSettings | None = None
        self.vm.state.subscribe(self.show_state, now=True)

    def _save(self) -> None:
        self.ctx.act(self.vm.save(self.enabled.isChecked(), self.endpoint.text(), self.service.text(),
                                       self.ratio.text()))

    def show_state(self, s: TracingState) -> None:
        if s.tracing != self._shown:  # what the daemon holds, once read or saved; a refused edit stays in the boxes
            self._shown = s.tracing
            self.enabled.setChecked(s.tracing.enabled)
            self.endpoint.setText(s.tracing.endpoint)
            self.service.setText(s.tracing.service_name)
            self.ratio.setText(f"{s.tracing.sample_ratio:g}")
        for widget in (self.enabled, self.endpoint, self.service, self.ratio, self.save):
            widget.setEnabled(s.loaded and not s.saving)
        self.error.setText(s.error or "")
        self.error.setVisible(bool(s.error))
        self.note.setText(f"Saved. {RESTART_NOTE}" if s.saved else RESTART_NOTE)


class PrometheusCard(Card):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__("Prometheus")
        self.body.addWidget(label("The daemon's figures are at /metrics, no token needed: each model's time to first "
                                  "token, request time and tokens, its queue, every node's CPU and memory and every "
                                  "GPU's use, ECC errors, XID errors and throttling.", muted=True, wrap=True))
        self.metrics_url = CopyField()
        self.metrics_url.setObjectName("PrometheusMetricsUrl")
        self.body.addWidget(self.metrics_url)
        self.body.addWidget(label("For Prometheus' service discovery (the daemon, and each node at its node "
                                  "exporter's port 9100), a job for prometheus.yml:", muted=True, wrap=True))
        self.snippet = QPlainTextEdit()
        self.snippet.setObjectName("PrometheusSnippet")
        self.snippet.setReadOnly(True)
        self.snippet.setProperty("role", "code")
        self.snippet.setMinimumHeight(170)
        self.body.addWidget(self.snippet)
        row = QHBoxLayout()
        self.body.addWidget(label("Prometheus on another machine: use an address of this daemon it can reach (LAN "
                                  "access on the Access page) and a copy of the admin-token file there.",
                                  muted=True, wrap=True))
        row.addStretch(1)
        self.copy = button("Copy", icon="action-copy", name="PrometheusCopy",
                           on_click=lambda: QGuiApplication.clipboard().setText(self.snippet.toPlainText()))
        row.addWidget(self.copy)
        self.body.addLayout(row)
        ctx.fleet.snapshot.subscribe(self.show_snapshot, now=True)

    def show_snapshot(self, snapshot: FleetSnapshot) -> None:
        base = daemon_base(snapshot)
        self.metrics_url.set_value(f"{base}/metrics")
        text = prometheus_snippet(base, token_file(snapshot)).text
        if self.snippet.toPlainText() != text:
            self.snippet.setPlainText(text)
