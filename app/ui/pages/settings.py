"""Settings: the app's own preferences — theme, start at login, notifications, daemon address, updates."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from PySide6.QtCore import QProcess
from PySide6.QtWidgets import (
    QApplication,
    QButtonGroup,
    QCheckBox,
    QHBoxLayout,
    QRadioButton,
    QScrollArea,
)

from app.context import AppContext
from app.ui.pages.observability_cards import PrometheusCard, TracingCard
from app.ui.widgets import Card, button, label, line_edit, page, page_header, set_prop
from app.viewmodels.app_settings import AppSettingsState
from app.viewmodels.updates import UpdatesState

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
        layout.addWidget(page_header("Settings", "How the app looks and starts, and the daemon's tracing "
                                                 "and metrics. Model settings live with each model."))

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
        self.daemon_url = line_edit("http://127.0.0.1:8484", name="DaemonUrl")
        self.apply_url = button("Apply", on_click=self._apply_url)
        addr.addWidget(self.daemon_url, 1)
        addr.addWidget(self.apply_url)
        daemon.body.addLayout(addr)
        self.daemon_note = label("", muted=True, wrap=True)
        self.daemon_note.setVisible(False)
        daemon.body.addWidget(self.daemon_note)
        daemon.body.addWidget(label(f"Data directory: {ctx.home}", muted=True, selectable=True))
        layout.addWidget(daemon)
        self.tracing = TracingCard(ctx)  # the daemon's: saved there, applied at its next start
        layout.addWidget(self.tracing)
        self.prometheus = PrometheusCard(ctx)
        layout.addWidget(self.prometheus)
        layout.addWidget(self._updates_card())
        layout.addStretch(1)
        self.vm.state.subscribe(self.show_state, now=True)
        self.vm.updates.state.subscribe(self.show_updates, now=True)

    def _updates_card(self) -> Card:
        card = Card("Updates")
        card.body.addWidget(label("Address of the signed release feed (feed.json) MirbadLLM checks for new versions. "
                                  "It is this project's releases unless you set another; empty turns updates off. "
                                  "Only releases signed with the key built into this app are installed.", muted=True, wrap=True))
        row = QHBoxLayout()
        self.feed_url = line_edit("Empty: updates are off", name="UpdateFeedUrl")
        self.apply_feed = button("Apply", name="UpdateFeedApply", on_click=self._apply_feed)
        row.addWidget(self.feed_url, 1)
        row.addWidget(self.apply_feed)
        card.body.addLayout(row)
        self.daily_updates = QCheckBox("Check for updates once a day")
        self.daily_updates.setObjectName("UpdateDaily")
        self.daily_updates.clicked.connect(self.vm.set_check_updates_daily)
        card.body.addWidget(self.daily_updates)
        actions = QHBoxLayout()
        self.check_updates = button("Check for updates", name="UpdateCheck",
                                    on_click=lambda: asyncio.ensure_future(self.vm.updates.check()))
        self.restart_update = button("Restart to update", kind="primary", name="UpdateRestart",
                                     on_click=lambda: asyncio.ensure_future(self._restart_to_update()))
        actions.addWidget(self.check_updates)
        actions.addWidget(self.restart_update)
        actions.addStretch(1)
        card.body.addLayout(actions)
        self.update_line = label("", wrap=True, selectable=True, name="UpdateResult")
        card.body.addWidget(self.update_line)
        # The new program starts once this one has quit (a second instance would only raise this window).
        self.launch_and_quit: Callable[[list[str]], bool] = _launch_and_quit
        return card

    def _apply_feed(self) -> None:
        error = self.vm.set_update_feed_url(self.feed_url.text())
        if error:
            self.update_line.setText(error)
            set_prop(self.update_line, "role", "error")

    async def _restart_to_update(self) -> None:
        command = await self.vm.updates.restart_command()
        if command and not self.launch_and_quit(command):
            self.update_line.setText("MirbadLLM was updated but could not restart itself: quit it and start it again.")

    def show_updates(self, s: UpdatesState) -> None:
        if not self.feed_url.hasFocus():
            self.feed_url.setText(s.feed_url)
        self.check_updates.setEnabled(s.enabled and not s.checking)
        self.restart_update.setVisible(s.ready is not None)
        self.update_line.setText(s.line)
        self.update_line.setVisible(bool(s.line))
        set_prop(self.update_line, "role", "error" if s.error else "")

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
        self.daily_updates.setChecked(s.prefs.check_updates_daily)
        if not self.daemon_url.hasFocus():
            self.daemon_url.setText(s.prefs.daemon_url)
        if s.restart_needed:
            self.daemon_note.setText("Saved. The new address is used the next time MirbadLLM starts.")
            self.daemon_note.setVisible(True)


def _launch_and_quit(command: list[str]) -> bool:
    started, _pid = QProcess.startDetached(command[0], command[1:])
    if started:
        QApplication.quit()  # main() quits cleanly on aboutToQuit; the daemon and models keep running
    else:
        _LOGGER.warning("could not start %s after the update", command)
    return bool(started)
