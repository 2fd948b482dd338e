"""A bar per tuning candidate, its score against the baseline's 1.0 line; drawn with QPainter."""

from __future__ import annotations

import math
from collections.abc import Sequence

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QWidget

from app.ui import theme


class ScoreChart(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.scores: tuple[tuple[str, float | None], ...] = ()
        self.setMinimumHeight(140)

    def set_scores(self, scores: Sequence[tuple[str, float | None]]) -> None:
        self.scores = tuple(scores)
        labels = [f"{name}: {'failed' if s is None else f'{s:.2f}'}" for name, s in self.scores]
        self.setToolTip("\n".join(labels))
        self.update()

    def paintEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        area = QRectF(self.rect()).adjusted(8, 8, -8, -18)
        painter.fillRect(self.rect(), QColor(theme.color("surface")))
        values = [s for _n, s in self.scores if s is not None and math.isfinite(s)]
        top = max([1.25, *values]) * 1.1
        baseline_y = area.bottom() - area.height() * (1.0 / top)
        if self.scores:
            width = area.width() / len(self.scores)
            for i, (_name, value) in enumerate(self.scores):
                if value is None:
                    continue
                height = area.height() * min(value, top) / top
                color = theme.color("chart_1") if value >= 1.0 else theme.color("chart_2")
                bar = QRectF(area.left() + i * width + width * 0.15, area.bottom() - height, width * 0.7, height)
                painter.fillRect(bar, QColor(color))
        pen = QPen(QColor(theme.color("muted")))
        pen.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.drawLine(int(area.left()), int(baseline_y), int(area.right()), int(baseline_y))
        painter.drawText(int(area.left()), int(self.height() - 4), "baseline = 1.0")
        painter.end()
