"""The Charts tab: six live charts of one model over 5 min / 1 h / 24 h / 7 d; on a node without a
GPU the GPU charts say so instead of drawing empty axes."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QButtonGroup,
    QGridLayout,
    QHBoxLayout,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.ui.charts import LiveChart
from app.ui.widgets import button, label
from app.viewmodels.charts import CHARTS, RANGES, ChartsState


class ChartsTab(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.vm = ctx.charts
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 12, 12, 12)
        bar = QHBoxLayout()
        self.range_buttons = QButtonGroup(self)
        self.range_buttons.setExclusive(True)
        for key, text in RANGES:
            b = button(text)
            b.setCheckable(True)
            b.setObjectName(f"range-{key}")
            b.clicked.connect(lambda _=False, k=key: self.vm.set_range(k))
            self.range_buttons.addButton(b)
            bar.addWidget(b)
        bar.addStretch(1)
        self.status = label("", muted=True)
        bar.addWidget(self.status)
        layout.addLayout(bar)
        grid = QGridLayout()
        grid.setSpacing(10)
        self.charts: list[LiveChart] = []
        for i, spec in enumerate(CHARTS):
            chart = LiveChart(spec.title, spec.unit, [legend for _key, legend in spec.series])
            chart.setMinimumHeight(170)
            grid.addWidget(chart, i // 2, i % 2)
            self.charts.append(chart)
        layout.addLayout(grid, 1)
        self.vm.state.subscribe(self.show_state, now=True)

    def show_state(self, state: ChartsState[str]) -> None:
        for b in self.range_buttons.buttons():
            b.setChecked(b.objectName() == f"range-{state.range}")
        if state.error:
            self.status.setText(state.error)
        elif state.loading and not state.ts:
            self.status.setText("Loading…")
        else:
            gen = state.latest("gen_tps")
            self.status.setText(f"{len(state.ts)} points" + (f" · now {gen:.1f} tok/s" if gen is not None else ""))
        for chart, spec in zip(self.charts, CHARTS):
            chart.set_message(state.message(spec))
            chart.set_data(state.ts, state.plot().lines(spec))
