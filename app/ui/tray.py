"""The tray icon: fleet state at a glance, every model with Start/Stop, and the app's exits.

The icon and tooltip follow the fleet snapshot; the menu is rebuilt each time it opens, so it is
never stale. Notifications come from the fleet's notices (a model became ready or failed).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app import format as fmt
from app.context import AppContext, Message
from app.ui import theme
from app.ui.icons import state_dot, tray_icon
from app.viewmodels.fleet import FleetSnapshot, FleetState, Notice
from app.viewmodels.releases import ReleasesState
from app.viewmodels.updates import UpdatesState
from daemon.api.models import ModelState

RUNNING = (ModelState.READY, ModelState.STARTING)


class TrayController(QObject):
    def __init__(self, ctx: AppContext, *, open_window: Callable[[], object], quit_app: Callable[[], object],
                 stop_all_and_quit: Callable[[], object]) -> None:
        super().__init__()
        self.ctx = ctx
        self._open_window = open_window
        self._quit_app = quit_app
        self._stop_all_and_quit = stop_all_and_quit
        self.notified: list[Notice] = []
        self.icon = QSystemTrayIcon()
        self.menu = QMenu()
        self.menu.aboutToShow.connect(self.rebuild_menu)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self.state: FleetState | None = None
        self._told_update: str | None = None  # the staged version already told of
        self._told_restart = ""  # the daemon's last restart outcome already told of
        self._unsubscribe = [ctx.fleet.snapshot.subscribe(self.show_state, now=True),
                             ctx.fleet.notices.subscribe(self.notify),
                             ctx.settings.updates.state.subscribe(self._update_staged),
                             ctx.releases.state.subscribe(self._daemon_restarted)]
        self.rebuild_menu()

    @property
    def available(self) -> bool:
        return QSystemTrayIcon.isSystemTrayAvailable()

    def show(self) -> None:
        if self.available:
            self.icon.show()

    def close(self) -> None:
        """At quit: hide the icon, stop listening, and delete the icon and its menu (the app's
        teardown then runs the deletions before the interpreter exits)."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        self.icon.hide()
        self.menu.aboutToShow.disconnect(self.rebuild_menu)
        self.icon.deleteLater()
        self.menu.deleteLater()
        self.deleteLater()

    def show_state(self, snap: FleetSnapshot) -> None:
        if snap.state != self.state:
            self.state = snap.state
            self.icon.setIcon(tray_icon(snap.state))
        self.icon.setToolTip(snap.summary)

    def _update_staged(self, state: UpdatesState) -> None:
        """A check (the daily one too) staged a new version: say so once, with where to restart."""
        if state.ready is not None and state.ready.version != self._told_update:
            self._told_update = state.ready.version
            self.notify(Notice("update", f"MirbadLLM {state.ready.version} is ready",
                               "Restart to update: Settings → Updates.", failed=False))

    def _daemon_restarted(self, state: ReleasesState) -> None:
        """After an update the daemon was restarted onto it ("Now running X.Y.Z"), or was not: say so once."""
        if state.line and not state.restarting and state.line != self._told_restart:
            self._told_restart = state.line
            title = "The daemon was not updated" if state.error else f"MirbadLLM {state.running} is running"
            self.notify(Notice("update", title, state.line, failed=state.error))

    def notify(self, notice: Notice) -> None:
        if not self.ctx.settings.state.value.prefs.notifications:
            return
        self.notified.append(notice)
        kind = QSystemTrayIcon.MessageIcon.Warning if notice.failed else QSystemTrayIcon.MessageIcon.Information
        if self.available and self.icon.isVisible():
            self.icon.showMessage(notice.title, notice.message, kind, 8000)

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self._open_window()

    def rebuild_menu(self) -> None:
        menu = self.menu
        menu.clear()
        snap = self.ctx.fleet.snapshot.value
        head = menu.addAction(snap.summary.removeprefix("MirbadLLM — ").capitalize())
        head.setEnabled(False)
        menu.addSeparator()
        if not snap.models:
            none = menu.addAction("No models yet" if snap.connected else "Daemon unreachable")
            none.setEnabled(False)
        for view in snap.models:
            d, s = view.definition, view.status
            verb = "Stop" if s.state in RUNNING else "Start"
            action = menu.addAction(f"{d.served_name} — {fmt.STATE_TEXT[s.state]}   ·   {verb}")
            action.setObjectName(f"tray-model-{d.id}")
            action.setData(d.id)
            action.setIcon(state_dot(theme.color(_state_color(s.state))))
            action.setEnabled(snap.connected and s.state != ModelState.STOPPING)
            if s.error:
                action.setToolTip(s.error)
            action.triggered.connect(lambda _=False, mid=d.id, running=s.state in RUNNING: self._toggle(mid, running))
        menu.addSeparator()
        self._add(menu, "Copy API URL", "tray-copy-url", self.copy_url)
        self._add(menu, "Open MirbadLLM", "tray-open", self._open_window)
        menu.addSeparator()
        self._add(menu, "Quit app (models keep running)", "tray-quit", self._quit_app)
        stop = self._add(menu, "Stop all models and quit", "tray-stop-all", self._stop_all_and_quit)
        stop.setEnabled(snap.connected)

    def _add(self, menu: QMenu, text: str, name: str, slot: Callable[[], object]) -> QAction:
        action = menu.addAction(text)
        action.setObjectName(name)
        action.triggered.connect(lambda _=False: slot())
        return action

    def action(self, name: str) -> QAction | None:
        return next((a for a in self.menu.actions() if a.objectName() == name), None)

    def _toggle(self, model_id: str, running: bool) -> None:
        view = self.ctx.fleet.snapshot.value.model(model_id)
        name = view.definition.served_name if view else model_id
        if running:
            self.ctx.act(self.ctx.fleet.stop_model(model_id), f"Stopping {name}")
        else:
            self.ctx.act(self.ctx.fleet.start_model(model_id), f"Starting {name}")

    def copy_url(self) -> None:
        url = self.ctx.fleet.snapshot.value.api_url
        QGuiApplication.clipboard().setText(url)
        self.ctx.messages.emit(Message(f"Copied {url}"))


def _state_color(state: ModelState) -> str:
    return {ModelState.READY: "ready", ModelState.STARTING: "starting", ModelState.STOPPING: "starting",
            ModelState.FAILED: "failed"}.get(state, "stopped")
