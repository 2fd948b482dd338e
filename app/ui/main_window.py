"""The main window: a sidebar of pages (Overview, Models, Discover, Nodes, Services, Playground, Access, Requests, Audit,
Backup, Releases, Downloads, Settings) and a status bar. Ctrl+1 … Ctrl+9 open the first nine.

Closing the window hides it: the tray stays and the models keep running. Quitting is the tray's
(or the File menu's) job.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, Message
from app.ui import theme
from app.ui.add_model_dialog import AddModelDialog
from app.ui.icons import app_icon, svg_icon
from app.ui.pages.access import AccessPage
from app.ui.pages.audit import AuditPage
from app.ui.pages.backup import BackupPage
from app.ui.pages.discover import DiscoverPage
from app.ui.pages.downloads import DownloadsPage
from app.ui.pages.models import ModelsPage
from app.ui.pages.nodes import NodesPage
from app.ui.pages.overview import OverviewPage
from app.ui.pages.playground import PlaygroundPage
from app.ui.pages.releases import ReleasesPage
from app.ui.pages.requests import RequestsPage
from app.ui.pages.services import ServicesPage
from app.ui.pages.settings import SettingsPage
from app.ui.widgets import bind
from app.viewmodels.fleet import FleetSnapshot, FleetState

PAGES = (("overview", "Overview"), ("models", "Models"), ("discover", "Discover"), ("nodes", "Nodes"), ("services", "Services"),
         ("playground", "Playground"), ("access", "Access"), ("requests", "Requests"), ("audit", "Audit"),
         ("backup", "Backup"), ("releases", "Releases"), ("downloads", "Downloads"), ("settings", "Settings"))


class MainWindow(QMainWindow):
    def __init__(self, ctx: AppContext, *, apply_theme: Callable[[str], object], tray_available: bool = True) -> None:
        super().__init__()
        self.ctx = ctx
        self.quitting = False
        self.quit_requested: Callable[[], None] = lambda: None  # main() wires the app's quit here
        self.tray_available = tray_available
        self.setWindowTitle("MirbadLLM")
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        self.setMinimumSize(1024, 680)

        central = QWidget()
        self.setCentralWidget(central)
        row = QHBoxLayout(central)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(0)
        self.stack = QStackedWidget()
        row.addWidget(self._sidebar())
        row.addWidget(self.stack, 1)
        self.overview = OverviewPage(ctx, open_model=self.open_model)
        self.models = ModelsPage(ctx)
        self.models.open_wizard = self.open_add_model
        self.discover = DiscoverPage(ctx)
        self.nodes = NodesPage(ctx)
        self.services = ServicesPage(ctx)
        self.playground = PlaygroundPage(ctx)
        self.access = AccessPage(ctx)
        self.requests = RequestsPage(ctx)
        self.audit = AuditPage(ctx)
        self.backup = BackupPage(ctx)
        self.releases = ReleasesPage(ctx)
        self.downloads = DownloadsPage(ctx)
        self.settings = SettingsPage(ctx, apply_theme)
        for widget in (self.overview, self.models, self.discover, self.nodes, self.services, self.playground, self.access,
                       self.requests, self.audit, self.backup, self.releases, self.downloads, self.settings):
            self.stack.addWidget(widget)
        self.nav.setCurrentRow(0)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Quit), self).activated.connect(lambda: self.quit_requested())
        for n, (key, _title) in enumerate(PAGES[:9], 1):
            QShortcut(QKeySequence(f"Ctrl+{n}"), self).activated.connect(lambda k=key: self.show_page(k))
        QShortcut(QKeySequence("Ctrl+Shift+N"), self).activated.connect(self.open_add_model)
        ctx.messages.subscribe(self._message)
        ctx.fleet.snapshot.subscribe(self._render_connection, now=True)
        bind(self, theme.changed, lambda _name: self._recolor())

    def _sidebar(self) -> QWidget:
        side = QWidget()
        side.setObjectName("Sidebar")
        side.setFixedWidth(220)
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 18, 0, 0)
        brand = QHBoxLayout()
        brand.setContentsMargins(18, 0, 12, 12)
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(28, 28))
        name = QLabel("MirbadLLM")
        name.setObjectName("Brand")
        brand.addWidget(logo)
        brand.addWidget(name, 1)
        layout.addLayout(brand)
        self.nav = QListWidget()
        self.nav.setObjectName("SidebarList")
        self.nav.setIconSize(QSize(20, 20))
        for key, title in PAGES:
            item = QListWidgetItem(svg_icon(f"nav-{key}"), title)
            item.setData(Qt.ItemDataRole.UserRole, key)
            self.nav.addItem(item)
        self.nav.currentRowChanged.connect(lambda row: self.stack.setCurrentIndex(row))
        layout.addWidget(self.nav, 1)
        self.connection = QLabel()
        self.connection.setObjectName("SidebarFooter")
        self.connection.setWordWrap(True)
        layout.addWidget(self.connection)
        return side

    def _recolor(self) -> None:
        for row, (key, _title) in enumerate(PAGES):
            self.nav.item(row).setIcon(svg_icon(f"nav-{key}"))
        self._render_connection(self.ctx.fleet.snapshot.value)

    def _render_connection(self, snap: FleetSnapshot) -> None:
        if snap.connected and snap.daemon:
            color = theme.color("ready")
            text = f"Daemon {snap.daemon.version} · {snap.daemon.host}:{snap.daemon.port}"
        elif snap.connected or (not snap.loaded and not snap.error):
            color, text = theme.color("starting"), "Connecting…"
        else:
            color, text = theme.color("failed"), "Daemon unreachable — retrying"
        self.connection.setText(f"<span style='color:{color}'>●</span>&nbsp; {text}")
        self.connection.setToolTip(snap.summary)
        if snap.state == FleetState.UNREACHABLE and snap.error:
            self.statusBar().showMessage(snap.error)

    def _message(self, message: Message) -> None:
        self.statusBar().showMessage(("⚠ " if message.error else "") + message.text, 0 if message.error else 6000)

    def show_page(self, key: str) -> None:
        self.nav.setCurrentRow([k for k, _t in PAGES].index(key))

    def open_add_model(self) -> AddModelDialog:
        """The add-model wizard (Hugging Face, a file, Ollama); open(), never a nested event loop."""
        dialog = AddModelDialog(self.ctx, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def open_model(self, model_id: str) -> None:
        self.show_page("models")
        self.models.select(model_id)

    def bring_to_front(self) -> None:
        self.show()
        self.setWindowState((self.windowState() & ~Qt.WindowState.WindowMinimized) | Qt.WindowState.WindowActive)
        self.raise_()
        self.activateWindow()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.quitting:
            event.accept()
            return
        if not self.tray_available:  # nowhere to live on: closing is quitting (models keep running)
            event.accept()
            self.quit_requested()
            return
        event.ignore()
        self.hide()
        self.ctx.messages.emit(Message("MirbadLLM is still in the tray; your models keep running."))
