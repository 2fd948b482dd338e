"""One live chart widget over pyqtgraph (preferred) or QtCharts.

pyqtgraph draws from numpy arrays with view clipping and automatic downsampling, which keeps
thousands of points redrawn every second smooth; QtCharts is the fallback when pyqtgraph is not
installed (``pip install pyqtgraph``), good enough for a few hundred points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QShowEvent
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.ui import theme
from app.ui.widgets import bind

try:
    import numpy as np
    import pyqtgraph as pg

    BACKEND = "pyqtgraph"
except ImportError:  # pragma: no cover - depends on what is installed
    BACKEND = "qtcharts"


def _scale(unit: str, peak: float) -> tuple[float, str]:
    if unit == "bytes":
        for factor, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if peak >= factor:
                return factor, name
        return 1.0, "B"
    return 1.0, unit


class LiveChart(QWidget):
    """A titled time chart of one or more series; ``set_data`` replaces everything at once.

    ``points`` is how many timestamps it was given, ``finite`` how many real values each series
    drew; ``set_message`` shows a line of text in place of the axes (a chart with nothing to draw).
    """

    def __init__(self, title: str, unit: str, legends: Sequence[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.unit = unit
        self.legends = tuple(legends)
        self.points = 0
        self.finite: tuple[int, ...] = (0,) * len(self.legends)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.notice = QLabel(self)
        self.notice.setObjectName("ChartNotice")
        self.notice.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.notice.setWordWrap(True)
        self.notice.setVisible(False)
        self._message: str | None = None
        self._view: QWidget | None = None
        if BACKEND == "pyqtgraph":
            # The plot is made when the chart is first shown: a window's charts sit on tabs and pages
            # a person may never open, and each pyqtgraph plot takes tens of milliseconds to build.
            self._plot: pg.PlotWidget | None = None
            self._curves: list[pg.PlotDataItem] = []
            self._drawn: tuple[str, Sequence[float], Sequence[Sequence[float]], float, float] | None = None
            bind(self, theme.changed, self._restyle_guarded)
        else:
            self._qtcharts()
        layout.addWidget(self.notice)

    def showEvent(self, event: QShowEvent) -> None:
        if BACKEND == "pyqtgraph" and self._plot is None:
            self._make_plot()
        super().showEvent(event)

    def _make_plot(self) -> None:
        colors = [theme.color("chart_1"), theme.color("chart_2")]
        self._plot = pg.PlotWidget(axisItems={"bottom": pg.DateAxisItem()}, enableMenu=False)
        self._plot.setBackground(theme.color("surface"))
        item = self._plot.getPlotItem()
        item.setTitle(self.title, color=theme.color("text"), size="10pt")
        item.showGrid(x=False, y=True, alpha=0.15)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.setClipToView(True)
        item.setDownsampling(auto=True, mode="peak")
        for axis in ("left", "bottom"):
            ax = item.getAxis(axis)
            ax.setPen(pg.mkPen(theme.color("border")))
            ax.setTextPen(pg.mkPen(theme.color("muted")))
        if len(self.legends) > 1:
            legend = item.addLegend(offset=(8, 4), labelTextColor=theme.color("muted"))
            legend.setBrush(pg.mkBrush(None))
        self._curves = [item.plot([], [], name=name, pen=pg.mkPen(colors[i % 2], width=2), connect="finite")
                        for i, name in enumerate(self.legends)]
        self._plot.setVisible(self._message is None)
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)
        layout.insertWidget(0, self._plot)
        self._view = self._plot
        if self._drawn is not None:
            self._draw(*self._drawn)
            self._drawn = None

    def _qtcharts(self) -> None:
        from PySide6.QtCharts import (
            QChart,
            QChartView,
            QDateTimeAxis,
            QLineSeries,
            QValueAxis,
        )

        colors = [theme.color("chart_1"), theme.color("chart_2")]
        chart = QChart()
        chart.setTitle(self.title)
        chart.setBackgroundBrush(QColor(theme.color("surface")))
        chart.setTitleBrush(QColor(theme.color("text")))
        chart.legend().setVisible(len(self.legends) > 1)
        chart.legend().setLabelColor(QColor(theme.color("muted")))
        self._x = QDateTimeAxis()
        self._x.setFormat("HH:mm")
        self._y = QValueAxis()
        for qt_axis in (self._x, self._y):
            qt_axis.setLabelsColor(QColor(theme.color("muted")))
            qt_axis.setGridLineColor(QColor(theme.color("border")))
        chart.addAxis(self._x, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(self._y, Qt.AlignmentFlag.AlignLeft)
        self._series = []
        for i, name in enumerate(self.legends):
            series = QLineSeries()
            series.setName(name)
            series.setPen(QPen(QColor(colors[i % 2]), 2))
            series.setUseOpenGL(False)
            chart.addSeries(series)
            series.attachAxis(self._x)
            series.attachAxis(self._y)
            self._series.append(series)
        view = QChartView(chart)
        view.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.layout().addWidget(view)
        self._view = view

    @property
    def message(self) -> str | None:
        return self._message

    def set_message(self, text: str | None) -> None:
        """``text`` in place of the axes (titled, muted); None draws the chart again."""
        if text == self._message:
            return
        self._message = text
        if text is not None:
            self.notice.setText(f"<b>{self.title}</b><br>{text}")
            self.notice.setStyleSheet(f"color: {theme.color('muted')}; background: {theme.color('surface')};")
        self.notice.setVisible(text is not None)
        if self._view is not None:
            self._view.setVisible(text is None)

    def _restyle_guarded(self, _name: str) -> None:
        try:
            if self._plot is not None:  # one made later takes the theme of then
                self._restyle()
        except RuntimeError:  # deleted widget
            pass

    def _restyle(self) -> None:
        assert self._plot is not None
        self._plot.setBackground(theme.color("surface"))
        item = self._plot.getPlotItem()
        for axis in ("left", "bottom"):
            ax = item.getAxis(axis)
            ax.setPen(pg.mkPen(theme.color("border")))
            ax.setTextPen(pg.mkPen(theme.color("muted")))
        colors = [theme.color("chart_1"), theme.color("chart_2")]
        for i, curve in enumerate(self._curves):
            curve.setPen(pg.mkPen(colors[i % 2], width=2))
        item.setTitle(item.titleLabel.text, color=theme.color("text"), size="10pt")

    def set_data(self, ts: Sequence[float], columns: Sequence[Sequence[float]]) -> None:
        self.points = len(ts)
        self.finite = tuple(sum(1 for v in col if math.isfinite(v)) for col in columns)
        finite = [v for col in columns for v in col if not math.isnan(v)]
        factor, unit = _scale(self.unit, max(finite, default=0.0))
        label = f"{self.title} ({unit})" if unit else self.title
        if BACKEND == "pyqtgraph":
            if self._plot is None:  # drawn when it is first shown
                self._drawn = (label, list(ts), [list(col) for col in columns], factor, max(finite, default=1.0))
            else:
                self._draw(label, ts, columns, factor, max(finite, default=1.0))
            return
        self._series[0].chart().setTitle(label)
        for series, col in zip(self._series, columns):
            series.replace([QPointF(t * 1000.0, v / factor) for t, v in zip(ts, col) if not math.isnan(v)])
        if ts:
            from PySide6.QtCore import QDateTime

            self._x.setRange(QDateTime.fromMSecsSinceEpoch(int(ts[0] * 1000)),
                             QDateTime.fromMSecsSinceEpoch(int(ts[-1] * 1000)))
        self._y.setRange(0, max(finite, default=1.0) / factor * 1.1 or 1.0)

    def _draw(self, label: str, ts: Sequence[float], columns: Sequence[Sequence[float]], factor: float,
              peak: float) -> None:
        assert self._plot is not None
        x = np.asarray(ts, dtype=float)
        self._plot.getPlotItem().setTitle(label, color=theme.color("text"), size="10pt")
        for curve, col in zip(self._curves, columns):
            curve.setData(x, np.asarray(col, dtype=float) / factor, connect="finite")
        # Every chart here is of a count, a rate or a size: from 0 up, never a negative axis (a
        # flat line of zeros would otherwise be drawn around 0 from -1 to 1)
        self._plot.getPlotItem().setYRange(0, peak / factor * 1.1 or 1.0, padding=0)
