"""The Benchmarks tab of a model: run one, the history, a chart over runs, two runs compared, Tune…,
and what the last tuning run changed, in the model's runtime's settings (llama.cpp's or vLLM's)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QProgressBar,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext, Message
from app.ui.charts import LiveChart
from app.ui.pages.tuning_wizard import TuningWizard
from app.ui.widgets import StillComboBox, button, label
from app.viewmodels.benchmarks import (
    BenchmarksState,
    BenchmarksViewModel,
    ComparisonRow,
)
from daemon.api.jobs import PRESETS, JobView

HISTORY_COLUMNS = (("When", None), ("Preset", None), ("Tok/s, one", "single_tps"),
                   ("Tok/s, all", "top_agg_tps"), ("First token ms", "single_ttft_p50_ms"),
                   ("Long prompt ms", "long_ttft_ms"), ("Objective", "objective_score"),
                   ("Router TTFT ×", "overhead_ttft_ratio"), ("Notes", None))


def figure(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    text = f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"
    return f"{text} {unit}".strip()


def change_text(row: ComparisonRow) -> str:
    if row.change is None:
        return "—"
    return f"{'+' if row.change >= 1 else '−'}{abs(row.change - 1) * 100:.0f} %"


class BenchmarksTab(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = BenchmarksViewModel(ctx.client, ctx.fleet.events)
        self.destroyed.connect(lambda *_a: self.vm.close())
        self.model_id: str | None = None
        self._active = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 12, 12, 12)
        layout.addLayout(self._toolbar())
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setObjectName("BenchmarkProgress")
        layout.addWidget(self.progress)
        self.tuning = label("", muted=True, wrap=True, selectable=True, name="LastTuning")
        layout.addWidget(self.tuning)
        self.table = QTableWidget(0, len(HISTORY_COLUMNS))
        self.table.setObjectName("BenchmarkHistory")
        self.table.setHorizontalHeaderLabels([title for title, _ in HISTORY_COLUMNS])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        header = self.table.horizontalHeader()
        for column in range(len(HISTORY_COLUMNS) - 1):  # every header read whole ("First token ms"); Notes takes the rest
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        layout.addWidget(self.table, 2)
        self.chart = LiveChart("Tokens per second over runs", "tok/s", ["One request", "All requests"])
        self.chart.setMinimumHeight(160)
        layout.addWidget(self.chart, 1)
        layout.addLayout(self._compare_bar())
        self.compare_table = QTableWidget(0, 4)
        self.compare_table.setObjectName("BenchmarkCompare")
        self.compare_table.setHorizontalHeaderLabels(["Metric", "Earlier", "Later", "Change"])
        self.compare_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.compare_table.horizontalHeader().setStretchLastSection(True)
        layout.addWidget(self.compare_table, 1)
        self.vm.state.subscribe(self.show_state, now=True)
        self.vm.finished.subscribe(self._announce)

    def _toolbar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.preset = StillComboBox()
        for info in PRESETS:
            self.preset.addItem(info.label, info.id)
            self.preset.setItemData(self.preset.count() - 1, info.description, Qt.ItemDataRole.ToolTipRole)
        self.run_button = button("Run benchmark", kind="primary", name="RunBenchmark", on_click=self._run)
        self.cancel_button = button("Cancel", name="CancelJob",
                                    on_click=lambda: self.ctx.act(self.vm.cancel(), "Cancelled"))
        self.overhead = QCheckBox("Measure the router's overhead")
        self.overhead.setObjectName("MeasureOverhead")
        self.overhead.setToolTip("Also send the same request straight to the runtime (or through its node's agent) "
                                 "and through MirbadLLM's router, 10 times each, interleaved: what it adds.")
        self.tune_button = button("Tune…", name="OpenTuning", on_click=self.open_wizard)
        self.status = label("", muted=True)
        for w in (label("Preset"), self.preset, self.overhead, self.run_button, self.cancel_button, self.tune_button):
            bar.addWidget(w)
        bar.addStretch(1)
        bar.addWidget(self.status)
        return bar

    def _compare_bar(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.first = StillComboBox()
        self.second = StillComboBox()
        for combo in (self.first, self.second):
            combo.currentIndexChanged.connect(lambda _i: self._compare_changed())
        bar.addWidget(label("Compare", role="section"))
        bar.addWidget(self.first)
        bar.addWidget(label("with"))
        bar.addWidget(self.second)
        bar.addStretch(1)
        return bar

    # --- actions ---------------------------------------------------------------------------------
    def set_active(self, active: bool) -> None:
        """Load only while the tab is looked at."""
        self._active = active
        if active:
            self.vm.show(self.model_id)

    def show_model(self, model_id: str | None) -> None:
        if model_id != self.model_id:
            self.model_id = model_id
            if self._active:
                self.vm.show(model_id)

    def _run(self) -> None:
        self.ctx.act(self.vm.run_benchmark(self.preset.currentData(), overhead=self.overhead.isChecked()),
                     "Benchmark started")

    def open_wizard(self) -> None:
        if self.model_id is None:
            return
        self.wizard = TuningWizard(self.ctx, self.model_id, self)
        self.wizard.show()

    def _compare_changed(self) -> None:
        self.vm.select_compare(self.first.currentData(), self.second.currentData())

    def _announce(self, view: JobView) -> None:
        text = f"Benchmark of {view.model} {view.state.value}" + (f": {view.error}" if view.error else "")
        self.ctx.messages.emit(Message(text, error=bool(view.error)))

    # --- rendering -------------------------------------------------------------------------------
    def show_state(self, state: BenchmarksState) -> None:
        busy = state.active is not None
        self.run_button.setEnabled(not busy and state.model_id is not None)
        self.tune_button.setEnabled(not busy and state.model_id is not None)
        self.cancel_button.setVisible(busy)
        self.progress.setVisible(busy)
        if state.active is not None:
            a = state.active
            self.progress.setValue(int(a.progress * 1000))
            eta = f" · about {fmt.duration(a.eta_s)} left" if a.eta_s else ""
            self.status.setText(f"{a.kind} {a.phase}: {a.message}{eta}")
        else:
            self.status.setText(state.error or ("Loading…" if state.loading else f"{len(state.runs)} run{'' if len(state.runs) == 1 else 's'}"))
        self.tuning.setText("\n".join(state.tuning_lines))
        self.tuning.setVisible(bool(state.tuning_lines))
        self._fill_history(state.runs)
        ts, one = state.chart("single_tps")
        ts_all, many = state.chart("top_agg_tps")
        self.chart.set_data(ts, [one, many if ts_all == ts else (float("nan"),) * len(ts)])
        self._fill_compare_choices(state)
        self._fill_compare(state.rows)

    def _fill_history(self, runs: tuple[JobView, ...]) -> None:
        self.table.setRowCount(len(runs))
        for row, run in enumerate(runs):
            cells = []
            for title, key in HISTORY_COLUMNS:
                if title == "When":
                    cells.append(fmt.when(run.started_at))
                elif title == "Preset":
                    cells.append(run.preset)
                elif title == "Notes":
                    cells.append("; ".join(run.noisy) or (run.error or ""))
                elif key == "objective_score":
                    cells.append(fmt.percent(run.summary[key] * 100) if key in run.summary else "—")
                elif key == "overhead_ttft_ratio":  # what the router adds, when measured (router ÷ runtime)
                    ratio, tps = run.summary.get(key), run.summary.get("overhead_tps_ratio")
                    cells.append("—" if ratio is None else f"{ratio:.2f}" + (f" · tok/s {tps:.2f}" if tps else ""))
                else:
                    cells.append(figure(run.summary.get(key or "")))
            for col, text in enumerate(cells):
                self.table.setItem(row, col, QTableWidgetItem(text))

    def _fill_compare_choices(self, state: BenchmarksState) -> None:
        wanted = [(f"{fmt.when(r.started_at)} · {r.preset}", r.id) for r in state.runs]
        for combo, index in ((self.first, 0), (self.second, 1)):
            current = [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]
            chosen = state.compare_ids[index] if state.compare_ids else None
            combo.blockSignals(True)
            if current != wanted:
                combo.clear()
                for text, run_id in wanted:
                    combo.addItem(text, run_id)
            if chosen is not None:
                combo.setCurrentIndex(max(0, combo.findData(chosen)))
            combo.blockSignals(False)

    def _fill_compare(self, rows: tuple[ComparisonRow, ...]) -> None:
        self.compare_table.setRowCount(len(rows))
        for i, r in enumerate(rows):
            for col, text in enumerate((r.label, figure(r.a, r.unit), figure(r.b, r.unit), change_text(r))):
                self.compare_table.setItem(i, col, QTableWidgetItem(text))
