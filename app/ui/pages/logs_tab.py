"""The Logs tab: live lines of the runtime, follow/pause, search, copy."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.ui.widgets import button, label, line_edit
from app.viewmodels.logs import LogsState


class LogsTab(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.vm = ctx.logs
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 12, 12, 12)
        bar = QHBoxLayout()
        self.search = line_edit("Search the log…", name="LogSearch", clearable=True)
        self.search.textChanged.connect(self.vm.set_query)
        self.pause_button = button("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(self.vm.set_paused)
        self.copy_button = button("Copy", icon="action-copy", on_click=self.copy)
        self.status = label("", muted=True)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.status)
        bar.addWidget(self.pause_button)
        bar.addWidget(self.copy_button)
        layout.addLayout(bar)
        self.text = QPlainTextEdit()
        self.text.setObjectName("LogText")
        self.text.setReadOnly(True)
        self.text.setProperty("role", "code")
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setMaximumBlockCount(5000)
        layout.addWidget(self.text, 1)
        self.vm.appended.subscribe(self._append)
        self.vm.reset.subscribe(self._reset)
        self.vm.state.subscribe(self._render, now=True)

    def _render(self, state: LogsState) -> None:
        self.pause_button.setText("Resume" if state.paused else "Pause")
        if state.error:
            self.status.setText(state.error)
        elif state.paused:
            self.status.setText("Paused — new lines wait")
        else:
            self.status.setText("Following" if state.following else "")

    def _append(self, lines: tuple[str, ...]) -> None:
        bar = self.text.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        self.text.appendPlainText("\n".join(lines))
        if at_bottom:
            self._to_last_line()
            bar.setValue(bar.maximum())

    def _reset(self, lines: tuple[str, ...]) -> None:
        self.text.setPlainText("\n".join(lines))
        self._to_last_line()

    def _to_last_line(self) -> None:
        """At the newest line, read from its start: not scrolled right to the end of a long one."""
        self.text.moveCursor(QTextCursor.MoveOperation.End)
        self.text.moveCursor(QTextCursor.MoveOperation.StartOfLine)
        self.text.horizontalScrollBar().setValue(0)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.vm.text())
