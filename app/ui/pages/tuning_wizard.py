"""The tuning wizard: preset → quick or full search → plan with ETA → live progress → results + Apply.

The search texts, the plan and the results follow the model's runtime: for a vLLM model the plan
lists the vLLM steps the daemon returns, and the results name the vLLM settings the winner changes
and the configuration it runs (``effective_config``) instead of llama.cpp's settings."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QRadioButton,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.score_chart import ScoreChart
from app.ui.widgets import button, label
from app.viewmodels.benchmarks import ComparisonRow, describe_changes
from app.viewmodels.tuning import (
    SEARCH_TEXT,
    Step,
    TuningWizardViewModel,
    WizardState,
)


def _choices(parent: QWidget, options: list[tuple[str, str, str]]) -> tuple[QWidget, QButtonGroup]:
    """A column of radio buttons (value, title, description); the group's buttons carry the value."""
    box = QWidget(parent)
    layout = QVBoxLayout(box)
    group = QButtonGroup(box)
    for value, title, description in options:
        radio = QRadioButton(title.replace("&", "&&"))  # a & is a mnemonic to Qt: "Agents & tools" showed "Agents _tools"
        radio.setObjectName(f"choice-{value}")
        radio.setProperty("value", value)
        group.addButton(radio)
        layout.addWidget(radio)
        text = label(description, muted=True, wrap=True)
        text.setObjectName(f"choice-{value}-text")
        layout.addWidget(text)
    layout.addStretch(1)
    return box, group


class TuningWizard(QDialog):
    def __init__(self, ctx: AppContext, model_id: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.vm = TuningWizardViewModel(ctx.client, ctx.fleet.events, model_id)
        self.finished.connect(lambda _r: self.vm.close())
        self.setWindowTitle(f"Tune {model_id}")
        self.setMinimumSize(720, 520)
        layout = QVBoxLayout(self)
        self.title = label("", role="figure")
        layout.addWidget(self.title)
        self.pages = QStackedWidget()
        layout.addWidget(self.pages, 1)
        self.error = label("", wrap=True, name="WizardError")
        layout.addWidget(self.error)
        self._build_pages()
        layout.addLayout(self._buttons())
        self._ticking = QTimer(self, interval=1000)
        self._ticking.timeout.connect(self._tick)
        self.finished.connect(lambda _r: self._ticking.stop())
        self.vm.state.subscribe(self.show_state, now=True)
        self._loading = asyncio.ensure_future(self.vm.load_model())
        self.finished.connect(lambda _r: self._loading.cancel())

    # --- pages -----------------------------------------------------------------------------------
    def _build_pages(self) -> None:
        s = self.vm.state.value
        presets, self.preset_group = _choices(self, [(p.id, p.label, p.description) for p in s.presets])
        self.preset_group.buttonClicked.connect(lambda b: self.vm.choose_preset(b.property("value")))
        search, self.search_group = _choices(self, [(k, k.capitalize(), v) for k, v in SEARCH_TEXT.items()])
        self.search_group.buttonClicked.connect(lambda b: self.vm.choose_search(b.property("value")))
        self.plan_text = label("", wrap=True, selectable=True, name="PlanText")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.phase = label("", wrap=True, name="TuningPhase")
        self.candidate = label("", muted=True, wrap=True)
        self.chart = ScoreChart()
        progress = QWidget()
        column = QVBoxLayout(progress)
        for w in (self.progress, self.phase, self.candidate, self.chart):
            column.addWidget(w)
        self.headline = label("", role="figure", wrap=True, name="TuningHeadline")
        self.decision = label("", muted=True, wrap=True, selectable=True)
        self.changes = label("", wrap=True, selectable=True, name="TuningChanges")
        self.results = QTableWidget(0, 4)
        self.results.setObjectName("TuningResults")
        self.results.setHorizontalHeaderLabels(["Metric", "Saved settings", "Best found", "Change"])
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.horizontalHeader().setStretchLastSection(True)
        results = QWidget()
        column = QVBoxLayout(results)
        for w in (self.headline, self.decision, self.changes, self.results):
            column.addWidget(w)
        for page in (presets, search, self.plan_text, progress, results):
            self.pages.addWidget(page)

    def _buttons(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.back = button("Back", on_click=lambda: self.vm.go(Step(max(0, self.vm.state.value.step - 1))))
        self.next = button("Next", kind="primary", name="WizardNext", on_click=self._next)
        self.cancel = button("Cancel run", name="WizardCancel")
        self.cancel.clicked.connect(lambda: self.ctx.act(self.vm.cancel(), "Tuning cancelled; saved settings restored"))
        self.restart = QCheckBox("Restart the model now")
        self.restart.setChecked(True)
        self.apply = button("Apply best", kind="primary", name="WizardApply",
                            on_click=lambda: self.ctx.act(self.vm.apply(self.restart.isChecked()), "Settings applied"))
        self.close_button = button("Close", on_click=self.reject)
        for w in (self.back, self.cancel):
            bar.addWidget(w)
        bar.addStretch(1)
        for w in (self.restart, self.apply, self.next, self.close_button):
            bar.addWidget(w)
        return bar

    def _next(self) -> None:
        step = self.vm.state.value.step
        if step == Step.PRESET:
            self.vm.go(Step.SEARCH)
        elif step == Step.SEARCH:
            self.ctx.act(self.vm.make_plan())
        elif step == Step.PLAN:
            self.ctx.act(self.vm.start())

    # --- rendering -------------------------------------------------------------------------------
    def show_state(self, s: WizardState) -> None:
        self.pages.setCurrentIndex(int(s.step))
        titles = ("Choose what to optimise for", "Choose how far to search", "The plan", "Tuning…", "Results")
        self.title.setText(titles[int(s.step)])
        for value, text in s.search_text.items():
            description = self.findChild(QLabel, f"choice-{value}-text")
            if description is not None:
                description.setText(text)
        for group, value in ((self.preset_group, s.preset), (self.search_group, s.search)):
            for b in group.buttons():
                b.setChecked(b.property("value") == value)
        self.error.setText(s.error or "")
        self.error.setVisible(bool(s.error))
        self.back.setVisible(s.step in (Step.SEARCH, Step.PLAN))
        self.next.setVisible(s.step <= Step.PLAN)
        self.next.setText("Start tuning" if s.step == Step.PLAN else "Next")
        self.next.setEnabled(not s.busy)
        running = s.job is not None and not s.job.state.finished
        self.cancel.setVisible(s.step == Step.PROGRESS and running)
        can_apply = s.step == Step.RESULTS and s.result is not None and s.result.winner is not None
        self.apply.setVisible(can_apply)
        self.restart.setVisible(can_apply)
        self.apply.setEnabled(can_apply and not s.applied)
        self.apply.setText("Applied" if s.applied else "Apply best")
        if s.plan is not None:
            self.plan_text.setText(_plan_text(s))
        if s.job is not None:
            self._show_progress(s)
        if s.step == Step.RESULTS:
            self._show_results(s)

    def _tick(self) -> None:
        if self.vm.state.value.job is not None:
            self._show_progress(self.vm.state.value)

    def _show_progress(self, s: WizardState) -> None:
        job = s.job
        assert job is not None
        self.progress.setValue(int(job.progress * 1000))
        count = f" — candidate {job.candidates_done} of {job.candidates_total}" if job.candidates_total else ""
        self.phase.setText(f"{job.phase}{count}{self.vm.eta_text()}")
        running = not job.state.finished
        if running != self._ticking.isActive():  # the ETA counts down each second while it runs
            self._ticking.start() if running else self._ticking.stop()
        self.candidate.setText(job.candidate or "")
        self.chart.set_scores([(p.label, p.score) for p in job.scores])

    def _show_results(self, s: WizardState) -> None:
        self.headline.setText(s.headline or (s.job.error if s.job and s.job.error else ""))
        r = s.result
        lines = [r.decision] if r is not None else []
        if r is not None:
            lines += [f"Note: {n}" for n in r.notes] + [f"Measurement may be noisy: {n}" for n in r.noisy]
            if r.restore_note:
                lines.append(r.restore_note)
        self.decision.setText("\n".join(lines))
        changes = describe_changes(r) if r is not None else []
        self.changes.setText("\n".join(changes))
        self.changes.setVisible(bool(changes))
        rows = s.rows()
        self.results.setRowCount(len(rows))
        for i, row in enumerate(rows):
            for col, text in enumerate((row.label, _figure(row.a, row.unit), _figure(row.b, row.unit), _change(row))):
                self.results.setItem(i, col, QTableWidgetItem(text))


def _figure(value: float | None, unit: str) -> str:
    return "—" if value is None else (f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}") + f" {unit}"


def _change(row: ComparisonRow) -> str:
    return "—" if row.change is None else f"{(row.change - 1) * 100:+.0f} %"


def _plan_text(s: WizardState) -> str:
    plan = s.plan
    assert plan is not None
    lines = [(f"{s.runtime_label} · preset: {plan.preset} · {plan.search} search · about {plan.candidates} configurations, then "
              f"{plan.confirmations} re-measured from fresh starts."),
             (f"Estimated time: {fmt.duration(plan.eta_s)} (a start ≈ {plan.start_s:.0f} s, "
              f"a benchmark ≈ {plan.benchmark_s:.0f} s)."), ""]
    for step in plan.steps:
        lines.append(f"• {step.dimension}: {', '.join(step.values) or '(nothing to try)'}")
        lines.append(f"    {step.goal} {step.tradeoff}")
    lines += ["", *plan.notes]
    return "\n".join(lines)
