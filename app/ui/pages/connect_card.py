"""The Access page's "Connect your apps": pick a tool, a model and where it runs; copy its ready
configuration (``daemon.api.connect``, the text ``mirbadllm ctl connect`` prints) and read where it goes.

A key's secret is filled in only after "New key for this app" created one here, and only until the
page is left or the key revoked: the daemon never shows a secret twice, and neither does this card
once it is gone. Otherwise the configuration holds a placeholder and says where a key comes from.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QPlainTextEdit, QWidget

from app.ui.widgets import Card, button, combo_box, label
from app.viewmodels.access import AccessState, AccessViewModel
from daemon.api.connect import TOOLS
from daemon.api.models import ApiKeyCreated

_LOGGER = logging.getLogger(__name__)

THIS_MACHINE, ANOTHER_DEVICE = "This machine", "Another device (LAN)"
Act = Callable[[Awaitable[Any], str], object]  # AppContext.act: run an action, report how it went


def _picker(name: str, min_chars: int) -> QComboBox:
    box = combo_box(name)
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(min_chars)  # a long served name does not widen the page
    return box


class ConnectCard(Card):
    def __init__(self, vm: AccessViewModel, act: Act, ask_name: Callable[[QWidget], str | None]) -> None:
        super().__init__("Connect your apps")
        self.vm = vm
        self.act = act
        self.ask_name = ask_name  # the page's: tests answer for the user
        self._fresh: ApiKeyCreated | None = None  # a key created here, its secret filled in

        pickers = QHBoxLayout()
        pickers.setSpacing(8)
        self.tool = _picker("ConnectTool", 10)
        for tool_id, tool in TOOLS.items():
            self.tool.addItem(tool.title, tool_id)
            self.tool.setItemData(self.tool.count() - 1, tool.about, Qt.ItemDataRole.ToolTipRole)
        self.model = _picker("ConnectModel", 10)
        self.origin = _picker("ConnectFrom", 10)
        self.origin.addItems([THIS_MACHINE, ANOTHER_DEVICE])
        for text, box in (("App", self.tool), ("Model", self.model), ("From", self.origin)):
            pickers.addWidget(label(text, muted=True))
            pickers.addWidget(box, 1)
        self.body.addLayout(pickers)

        self.where = label("", wrap=True, selectable=True, name="ConnectWhere")
        self.body.addWidget(self.where)
        self.text = QPlainTextEdit()
        self.text.setObjectName("ConnectText")
        self.text.setReadOnly(True)
        self.text.setProperty("role", "code")
        self.text.setMinimumHeight(190)
        self.body.addWidget(self.text, 1)

        row = QHBoxLayout()
        self.key_note = label("", muted=True, wrap=True, name="ConnectKeyNote")
        row.addWidget(self.key_note, 1)
        self.new_key = button("New key for this app", icon="action-add", name="ConnectNewKey")
        self.new_key.setToolTip("Create an API key and fill its secret in (it is shown only now)")
        self.new_key.clicked.connect(self.create_key)
        row.addWidget(self.new_key)
        self.copy = button("Copy", kind="primary", icon="action-copy", color="#FFFFFF", name="ConnectCopy",
                           on_click=self.copy_text)
        row.addWidget(self.copy)
        self.body.addLayout(row)

        for box in (self.tool, self.model, self.origin):
            box.currentIndexChanged.connect(lambda _i: self.render())
        vm.state.subscribe(self.show_state, now=True)

    def show_state(self, s: AccessState) -> None:
        if self._fresh is not None and all(k.id != self._fresh.info.id for k in s.keys) and s.settings is not None:
            self._fresh = None  # revoked: its secret must not stay in a configuration
        wanted = list(s.models)
        if [self.model.itemText(i) for i in range(self.model.count())] != wanted:
            current = self.model.currentText()
            self.model.blockSignals(True)
            self.model.clear()
            self.model.addItems(wanted)
            self.model.setCurrentIndex(wanted.index(current) if current in wanted else 0)
            self.model.blockSignals(False)
        lan = bool(s.lan_urls)
        self.origin.setEnabled(lan)
        self.origin.setToolTip("" if lan else "Open /v1 to your network (above) to connect another device.")
        if not lan and self.origin.currentIndex():
            self.origin.blockSignals(True)
            self.origin.setCurrentIndex(0)
            self.origin.blockSignals(False)
        self.render()

    def render(self) -> None:
        s = self.vm.state.value
        snippet, note = s.connection(str(self.tool.currentData()), self.model.currentText(),
                                     from_lan=self.origin.currentIndex() == 1,
                                     secret=self._fresh.key if self._fresh else None)
        if self._fresh is not None:
            note = (f"Filled in with the new key \u201c{self._fresh.info.name}\u201d: copy it now, it is not "
                    "shown again once you leave this page.")
        if self.text.toPlainText() != snippet.text:
            self.text.setPlainText(snippet.text)
            self.copy.setText("Copy")
        self.where.setText(snippet.where_it_goes)
        self.key_note.setText(note)

    def copy_text(self) -> None:
        QGuiApplication.clipboard().setText(self.text.toPlainText())
        self.copy.setText("Copied")

    def create_key(self) -> None:
        name = self.ask_name(self)
        if not name:
            return

        async def run() -> None:
            self._fresh = await self.vm.create_key(name)
            self.render()

        self.act(run(), f"Created key \u201c{name}\u201d")

    def forget_secret(self) -> None:
        """Leaving the page: the secret goes, as it does with the new-key dialog."""
        if self._fresh is not None:
            self._fresh = None
            self.render()
