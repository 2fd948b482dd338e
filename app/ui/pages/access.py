"""Access: who may use /v1 — API keys and their limits, LAN access — and how to connect apps to it."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QScrollArea,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.dialogs import NewKeyDialog
from app.ui.pages.connect_card import ConnectCard
from app.ui.widgets import (
    Card,
    CopyField,
    StillSpinBox,
    button,
    fit_columns,
    label,
    page,
    page_header,
    read_only_table,
)
from app.viewmodels.access import LAN_NEEDS_KEYS, AccessState, limits_cell, usage_cells
from daemon.api.models import ApiKeyCreated, ApiKeyInfo

Limits = tuple[int | None, int | None]  # requests per minute, tokens per UTC day; None: no limit


def _ask_name(parent: QWidget) -> str | None:
    name, ok = QInputDialog.getText(parent, "New API key", "Name (where it will be used):")
    return name.strip() if ok and name.strip() else None


class KeyLimitsDialog(QDialog):
    """A key's requests per minute and tokens per UTC day; 0 is no limit."""

    def __init__(self, info: ApiKeyInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Limits of “{info.name}”")
        layout = QVBoxLayout(self)
        layout.addWidget(label("Requests past a limit are refused with 429 and told when to retry. "
                               "The day is the UTC day.", muted=True, wrap=True))
        form = QFormLayout()
        self.rpm = self._spin(info.limits.requests_per_minute, 1_000_000, "RpmLimit")
        self.tokens = self._spin(info.limits.tokens_per_day, 2_000_000_000, "TokensPerDayLimit")
        self.tokens.setSingleStep(1000)
        form.addRow("Requests per minute", self.rpm)
        form.addRow("Tokens per day", self.tokens)
        layout.addLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    @staticmethod
    def _spin(value: int | None, top: int, name: str) -> QSpinBox:
        spin = StillSpinBox()
        spin.setObjectName(name)
        spin.setRange(0, top)
        spin.setSpecialValueText("No limit")  # shown for 0
        spin.setValue(value or 0)
        return spin

    def limits(self) -> Limits:
        return (self.rpm.value() or None, self.tokens.value() or None)


def _ask_limits(parent: QWidget, info: ApiKeyInfo) -> Limits | None:
    dialog = KeyLimitsDialog(info, parent)  # from a click, like the name prompt: not inside a task
    return dialog.limits() if dialog.exec() == QDialog.DialogCode.Accepted else None


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
        self.ask_limits: Callable[[QWidget, ApiKeyInfo], Limits | None] = _ask_limits
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Access", "Who may use the endpoint, and how to point your tools at it."))

        top = QVBoxLayout()  # stacked: the key table needs the page's width for its use and limits
        top.setSpacing(12)
        net = Card("Network")
        self.url = CopyField()
        net.body.addWidget(self.url)
        self.other_urls = label("", muted=True, wrap=True, selectable=True, name="LanUrls")
        net.body.addWidget(self.other_urls)
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
        top.addWidget(net)

        keys = Card("API keys")
        bar = QHBoxLayout()
        self.keys_note = label("", muted=True, wrap=True)
        bar.addWidget(self.keys_note, 1)
        self.create_button = button("Create key", kind="primary", icon="action-add", color="#FFFFFF", name="CreateKey",
                                    on_click=self.create_key)
        bar.addWidget(self.create_button)
        keys.body.addLayout(bar)
        self.table = read_only_table("KeyTable", ["Name", "Key", "Created", "Last used", "Requests", "Tokens",
                                                  "Limits", ""])
        tips = {4: "Last 24 hours / since the key was created", 5: "Last 24 hours / since the key was created",
                6: "Requests in the last minute / per minute; tokens since 00:00 UTC / per day"}
        for col, tip in tips.items():
            item = self.table.horizontalHeaderItem(col)
            if item is not None:
                item.setToolTip(tip)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        fit_columns(self.table, 0)
        self.table.setMinimumHeight(190)
        keys.body.addWidget(self.table)
        top.addWidget(keys)
        layout.addLayout(top)

        self.connect_card = ConnectCard(self.vm, ctx.act, lambda parent: self.ask_name(parent))
        layout.addWidget(self.connect_card, 1)
        self.vm.state.subscribe(self.show_state, now=True)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self.vm.state.value.settings is not None:  # loaded once: read the keys' use again
            self.ctx.act(self.vm.refresh())

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.connect_card.forget_secret()

    def _require_clicked(self, on: bool) -> None:
        self.ctx.act(self.vm.set_require_keys(on), "Keys required" if on else "Keys no longer required")
        self.show_state(self.vm.state.value)  # undo the tick if the view-model refuses

    def show_state(self, s: AccessState) -> None:
        self.url.set_value(s.api_url)
        others = [u for u in s.lan_urls if u != s.api_url]
        self.other_urls.setText("Also reachable at " + ", ".join(others) if others else "")
        self.other_urls.setVisible(bool(others))
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

    def _render_keys(self, s: AccessState) -> None:
        self.table.setRowCount(len(s.keys))
        for row, info in enumerate(s.keys):
            for col, text in enumerate((info.name, f"{info.prefix}…", fmt.when(info.created_at),
                                        fmt.ago(info.last_used_at), *usage_cells(info))):
                self.table.setItem(row, col, QTableWidgetItem(text))
            limits = button(limits_cell(info), kind="flat")  # the limits, shown where they are set
            limits.setObjectName(f"limits-{info.id}")
            limits.setToolTip("Set this key's requests per minute and tokens per day")
            limits.clicked.connect(lambda _=False, k=info: self.edit_limits(k))
            self.table.setCellWidget(row, 6, limits)
            revoke = button("Revoke", kind="danger")
            revoke.setObjectName(f"revoke-{info.id}")
            revoke.clicked.connect(lambda _=False, i=info.id, n=info.name: self.ctx.act(
                self.vm.revoke_key(i), f"Revoked key “{n}”"))
            self.table.setCellWidget(row, 7, revoke)

    def edit_limits(self, info: ApiKeyInfo) -> None:
        wanted = self.ask_limits(self, info)
        if wanted is not None:
            self.ctx.act(self.vm.set_limits(info.id, *wanted), f"Limits of “{info.name}” saved")

    def create_key(self) -> None:
        name = self.ask_name(self)
        if not name:
            return

        async def run() -> None:
            created = await self.vm.create_key(name)
            self.show_key(self, created)

        self.ctx.act(run())
