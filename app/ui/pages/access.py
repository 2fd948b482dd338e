"""Access: who may use /v1 — API keys, LAN access — and how to connect tools to it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QPlainTextEdit,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.dialogs import NewKeyDialog
from app.ui.widgets import Card, CopyField, button, label, page, page_header
from app.viewmodels.access import LAN_NEEDS_KEYS, AccessState, usage_cells
from daemon.api.models import ApiKeyCreated


def _ask_name(parent: QWidget) -> str | None:
    name, ok = QInputDialog.getText(parent, "New API key", "Name (where it will be used):")
    return name.strip() if ok and name.strip() else None


def _show_key(parent: QWidget, created: ApiKeyCreated) -> None:
    # open(), not exec(): a nested event loop inside an asyncio task would re-enter the loop.
    dialog = NewKeyDialog(created, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()


class AccessPage(QScrollArea):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = ctx.access
        self.ask_name: Callable[[QWidget], str | None] = _ask_name  # tests answer for the user
        self.show_key: Callable[[QWidget, ApiKeyCreated], None] = _show_key
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Access", "Who may use the endpoint, and how to point your tools at it."))

        top = QHBoxLayout()
        top.setSpacing(12)
        net = Card("Network")
        self.url = CopyField()
        net.body.addWidget(self.url)
        self.lan = QCheckBox("Open /v1 to other devices on my network (LAN)")
        self.lan.setObjectName("LanAccess")
        self.lan.clicked.connect(lambda on: ctx.act(self.vm.set_lan_access(on),
                                                     "LAN access on" if on else "LAN access off"))
        self.require = QCheckBox("Require an API key on this machine too")
        self.require.setObjectName("RequireKeys")
        self.require.clicked.connect(self._require_clicked)
        net.body.addWidget(self.lan)
        self.lan_note = label(LAN_NEEDS_KEYS, muted=True, wrap=True)
        net.body.addWidget(self.lan_note)
        net.body.addWidget(self.require)
        net.body.addStretch(1)
        top.addWidget(net, 1)

        keys = Card("API keys")
        bar = QHBoxLayout()
        self.keys_note = label("", muted=True, wrap=True)
        bar.addWidget(self.keys_note, 1)
        self.create_button = button("Create key", kind="primary", icon="action-add", color="#FFFFFF")
        self.create_button.setObjectName("CreateKey")
        self.create_button.clicked.connect(self.create_key)
        bar.addWidget(self.create_button)
        keys.body.addLayout(bar)
        self.table = QTableWidget(0, 7)
        self.table.setObjectName("KeyTable")
        self.table.setHorizontalHeaderLabels(["Name", "Key", "Created", "Last used", "Requests", "Tokens", ""])
        for col in (4, 5):
            self.table.horizontalHeaderItem(col).setToolTip("Last 24 hours / since the key was created")
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setShowGrid(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3, 4, 5, 6):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setMinimumHeight(190)
        keys.body.addWidget(self.table)
        top.addWidget(keys, 2)
        layout.addLayout(top)

        connect = Card("Connect your tools")
        self.snippet_tabs = QTabWidget()
        self.snippet_tabs.setObjectName("Snippets")
        connect.body.addWidget(self.snippet_tabs)
        layout.addWidget(connect, 1)
        self._snippet_key: tuple[str, str, bool] | None = None
        self.vm.state.subscribe(self.show_state, now=True)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self.vm.state.value.settings is not None:  # loaded once: read the keys' use again
            self.ctx.act(self.vm.refresh())

    def _require_clicked(self, on: bool) -> None:
        self.ctx.act(self.vm.set_require_keys(on), "Keys required" if on else "Keys no longer required")
        self.show_state(self.vm.state.value)  # undo the tick if the view-model refuses

    def show_state(self, s: AccessState) -> None:
        self.url.set_value(s.api_url)
        lan = bool(s.settings and s.settings.lan_access)
        self.lan.setChecked(lan)
        self.require.setChecked(s.keys_required)
        self.require.setEnabled(not lan)
        self.require.setToolTip("Keys stay required while /v1 is open to the LAN." if lan else "")
        if s.keys_required:
            self.keys_note.setText("Keys are required: clients send “Authorization: Bearer <key>”.")
        else:
            self.keys_note.setText("Keys are not required on this machine yet; create them before opening to the LAN.")
        self._render_keys(s)
        key = (s.api_url, s.model, s.keys_required)
        if key != self._snippet_key:
            self._snippet_key = key
            self._render_snippets(s)

    def _render_keys(self, s: AccessState) -> None:
        self.table.setRowCount(len(s.keys))
        for row, info in enumerate(s.keys):
            for col, text in enumerate((info.name, f"{info.prefix}…", fmt.when(info.created_at),
                                        fmt.ago(info.last_used_at), *usage_cells(info))):
                self.table.setItem(row, col, QTableWidgetItem(text))
            revoke = button("Revoke", kind="danger")
            revoke.setObjectName(f"revoke-{info.id}")
            revoke.clicked.connect(lambda _=False, i=info.id, n=info.name: self.ctx.act(
                self.vm.revoke_key(i), f"Revoked key “{n}”"))
            self.table.setCellWidget(row, 6, revoke)

    def _render_snippets(self, s: AccessState) -> None:
        while self.snippet_tabs.count():
            self.snippet_tabs.removeTab(0)
        for snippet in s.snippets:
            tab = QWidget()
            box = QVBoxLayout(tab)
            text = QPlainTextEdit(snippet.text)
            text.setReadOnly(True)
            text.setProperty("role", "code")
            text.setMinimumHeight(150)
            copy = button("Copy", icon="action-copy")
            copy.clicked.connect(lambda _=False, t=snippet.text: QGuiApplication.clipboard().setText(t))
            box.addWidget(text, 1)
            row = QHBoxLayout()
            row.addStretch(1)
            row.addWidget(copy)
            box.addLayout(row)
            self.snippet_tabs.addTab(tab, snippet.title)

    def create_key(self) -> None:
        name = self.ask_name(self)
        if not name:
            return

        async def run() -> None:
            created = await self.vm.create_key(name)
            self.show_key(self, created)

        self.ctx.act(run())
