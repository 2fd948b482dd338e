"""Dialogs: the new API key (shown once), and the daemon that would not start."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.bootstrap import BootstrapError
from app.ui.widgets import CopyField, label
from daemon.api.models import ApiKeyCreated


class NewKeyDialog(QDialog):
    """Shows a new key's secret once, with Copy; nothing keeps it after the dialog closes."""

    def __init__(self, created: ApiKeyCreated, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("New API key")
        self.setMinimumWidth(560)
        layout = QVBoxLayout(self)
        layout.setSpacing(10)
        title = label(f"Key “{created.info.name}” created", role="figure")
        title.setStyleSheet("font-size: 18px;")
        layout.addWidget(title)
        layout.addWidget(label("Copy it now: this is the only time it is shown. MirbadLLM keeps only a hash, "
                               "so a lost key cannot be recovered — revoke it and create another.", wrap=True))
        self.field = CopyField(created.key)
        self.field.setObjectName("NewKeyField")
        layout.addWidget(self.field)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        buttons.accepted.connect(self.accept)
        layout.addWidget(buttons)

    def done(self, result: int) -> None:
        self.field.set_value("")  # the secret leaves the widget tree with the dialog
        super().done(result)


class DaemonFailedDialog(QDialog):
    def __init__(self, error: BootstrapError, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("MirbadLLM could not start its daemon")
        self.setMinimumSize(680, 420)
        layout = QVBoxLayout(self)
        title = label(error.message, role="figure", wrap=True)
        title.setStyleSheet("font-size: 17px;")
        layout.addWidget(title)
        layout.addWidget(label(error.advice, wrap=True, selectable=True))
        if error.log_tail:
            layout.addWidget(label("Last lines of the daemon's log", role="section"))
            log = QPlainTextEdit(error.log_tail)
            log.setObjectName("DaemonLog")
            log.setReadOnly(True)
            log.setProperty("role", "code")
            layout.addWidget(log, 1)
        buttons = QDialogButtonBox()
        self.copy = buttons.addButton("Copy details", QDialogButtonBox.ButtonRole.ActionRole)
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(
            f"{error.message}\n{error.advice}\n\n{error.log_tail}"))
        self.retry = buttons.addButton("Try again", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton("Quit", QDialogButtonBox.ButtonRole.RejectRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
