"""Settings: the app's own preferences — theme, start at login, notifications, daemon address."""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QHBoxLayout,
    QLineEdit,
    QRadioButton,
    QScrollArea,
)

from app.context import AppContext
from app.ui.widgets import Card, button, label, page, page_header
from app.viewmodels.app_settings import AppSettingsState

_LOGGER = logging.getLogger(__name__)

THEMES = (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark"))


class SettingsPage(QScrollArea):
    def __init__(self, ctx: AppContext, apply_theme: Callable[[str], object]) -> None:
        super().__init__()
        self.vm = ctx.settings
        self._apply_theme = apply_theme
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Settings", "How the app looks and starts. Model settings live with each model."))

        look = Card("Appearance")
        row = QHBoxLayout()
        self.theme_group = QButtonGroup(self)
        self.theme_buttons: dict[str, QRadioButton] = {}
        for key, text in THEMES:
            radio = QRadioButton(text)
            radio.setObjectName(f"theme-{key}")
            radio.clicked.connect(lambda _=False, k=key: self._theme(k))
            self.theme_group.addButton(radio)
            self.theme_buttons[key] = radio
            row.addWidget(radio)
        row.addStretch(1)
        look.body.addLayout(row)
        layout.addWidget(look)

        start = Card("Start-up")
        self.autostart = QCheckBox("Start MirbadLLM when I log in (in the tray, without a window)")
        self.autostart.setObjectName("Autostart")
        self.autostart.clicked.connect(self.vm.set_autostart)
        self.autostart_error = label("", role="error", wrap=True)
        self.notifications = QCheckBox("Notify me when a model becomes ready or fails")
        self.notifications.setObjectName("Notifications")
        self.notifications.clicked.connect(self.vm.set_notifications)
        start.body.addWidget(self.autostart)
        start.body.addWidget(self.autostart_error)
        start.body.addWidget(self.notifications)
        layout.addWidget(start)

        daemon = Card("Daemon")
        daemon.body.addWidget(label("Admin address of the daemon this app drives. Leave empty for the one on this "
                                    "machine (read from its daemon.json).", muted=True, wrap=True))
        addr = QHBoxLayout()
        self.daemon_url = QLineEdit()
        self.daemon_url.setObjectName("DaemonUrl")
        self.daemon_url.setPlaceholderText("http://127.0.0.1:8484")
        self.apply_url = button("Apply")
        self.apply_url.clicked.connect(self._apply_url)
        addr.addWidget(self.daemon_url, 1)
        addr.addWidget(self.apply_url)
        daemon.body.addLayout(addr)
        self.daemon_note = label("", muted=True, wrap=True)
        self.daemon_note.setVisible(False)
        daemon.body.addWidget(self.daemon_note)
        daemon.body.addWidget(label(f"Data directory: {ctx.home}", muted=True, selectable=True))
        layout.addWidget(daemon)
        layout.addStretch(1)
        self.vm.state.subscribe(self.show_state, now=True)

    def _theme(self, key: str) -> None:
        self.vm.set_theme(key)
        self._apply_theme(key)

    def _apply_url(self) -> None:
        error = self.vm.set_daemon_url(self.daemon_url.text())
        if error:
            self.daemon_note.setText(error)
            self.daemon_note.setVisible(True)

    def show_state(self, s: AppSettingsState) -> None:
        self.theme_buttons[s.prefs.theme].setChecked(True)
        self.autostart.setChecked(s.autostart)
        self.autostart_error.setText(s.autostart_error or "")
        self.autostart_error.setVisible(bool(s.autostart_error))
        self.notifications.setChecked(s.prefs.notifications)
        if not self.daemon_url.hasFocus():
            self.daemon_url.setText(s.prefs.daemon_url)
        if s.restart_needed:
            self.daemon_note.setText("Saved. The new address is used the next time MirbadLLM starts.")
            self.daemon_note.setVisible(True)
