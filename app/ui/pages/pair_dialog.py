"""The pairing wizard's dialog: choose the agent, compare its fingerprint, type its code."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, Message
from app.ui.widgets import button, label, line_edit
from app.viewmodels.pairing import WizardState, WizardStep
from daemon.api.nodes import DiscoveredNode

STEPS = (WizardStep.CHOOSE, WizardStep.CONFIRM, WizardStep.DONE)


class PairDialog(QDialog):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.wizard = ctx.pairing
        self.setWindowTitle("Pair a node")
        self.setMinimumSize(560, 400)
        layout = QVBoxLayout(self)
        self.pages = QStackedWidget()
        self.pages.addWidget(self._choose_page())
        self.pages.addWidget(self._confirm_page())
        self.pages.addWidget(self._done_page())
        layout.addWidget(self.pages, 1)
        self.error = label("", role="error", wrap=True, name="PairError")
        layout.addWidget(self.error)
        self._unsubscribe = self.wizard.state.subscribe(self.show_state)
        self.wizard.reset()
        self.show_state(self.wizard.state.value)

    # --- pages ----------------------------------------------------------------------------------
    def _choose_page(self) -> QWidget:
        page = QWidget()
        col = QVBoxLayout(page)
        col.addWidget(label("Start `mirbadllm agent` on the other machine. It prints a pairing code and a "
                            "fingerprint, and shows up here when your network lets it.", wrap=True))
        col.addWidget(label("Waiting to be paired", role="section"))
        self.found = QListWidget()
        self.found.setObjectName("DiscoveredList")
        self.found.itemActivated.connect(self._picked)
        col.addWidget(self.found, 1)
        col.addWidget(label("Not listed? Type its address:", muted=True))
        row = QHBoxLayout()
        self.address = line_edit("192.168.1.20:9443", name="PairAddress")
        self.address.returnPressed.connect(self._look_up)
        self.look_up_button = button("Look up", on_click=self._look_up)
        row.addWidget(self.address, 1)
        row.addWidget(self.look_up_button)
        col.addLayout(row)
        self.next_button = button("Next", kind="primary", on_click=lambda: self._picked(self.found.currentItem()))
        col.addWidget(self.next_button, 0, Qt.AlignmentFlag.AlignRight)
        return page

    def _confirm_page(self) -> QWidget:
        page = QWidget()
        col = QVBoxLayout(page)
        self.candidate_title = label("", role="figure")
        self.candidate_title.setStyleSheet("font-size: 18px;")
        col.addWidget(self.candidate_title)
        col.addWidget(label("1. Check that the agent printed this fingerprint:", wrap=True))
        self.fingerprint = label("", role="code", selectable=True, name="PairFingerprint")
        self.fingerprint.setStyleSheet("font-size: 20px; font-weight: 600; letter-spacing: 1px;")
        col.addWidget(self.fingerprint)
        col.addWidget(label("A different fingerprint means another machine answers at that address: do not "
                            "pair it.", muted=True, wrap=True))
        col.addWidget(label("2. Type the pairing code it printed:", wrap=True))
        self.code = line_edit("ABCD-EFGH", name="PairCode")
        self.code.setMaxLength(12)
        self.code.returnPressed.connect(self._pair)
        col.addWidget(self.code)
        col.addStretch(1)
        row = QHBoxLayout()
        back = button("Back", on_click=self.wizard.back)
        self.pair_button = button("Pair", kind="primary", name="PairButton", on_click=self._pair)
        row.addWidget(back)
        row.addStretch(1)
        row.addWidget(self.pair_button)
        col.addLayout(row)
        return page

    def _done_page(self) -> QWidget:
        page = QWidget()
        col = QVBoxLayout(page)
        self.done_text = label("", role="figure", wrap=True, name="PairDone")
        col.addWidget(self.done_text)
        col.addWidget(label("Models can now be placed on it: pick it as the node in a model's settings.",
                            muted=True, wrap=True))
        col.addStretch(1)
        close = button("Close", kind="primary", on_click=self.accept)
        col.addWidget(close, 0, Qt.AlignmentFlag.AlignRight)
        return page

    # --- state ----------------------------------------------------------------------------------
    def show_discovered(self, entries: tuple[DiscoveredNode, ...]) -> None:
        self.found.clear()
        for entry in entries:
            item = QListWidgetItem(f"{entry.name}   {entry.address}   {entry.short_fingerprint}")
            item.setData(Qt.ItemDataRole.UserRole, entry)
            self.found.addItem(item)
        if entries:
            self.found.setCurrentRow(0)

    def show_state(self, s: WizardState) -> None:
        self.pages.setCurrentIndex(STEPS.index(s.step))
        self.error.setText(s.error or "")
        self.error.setVisible(bool(s.error))
        for widget in (self.pair_button, self.look_up_button, self.code):
            widget.setEnabled(not s.busy)
        if s.candidate is not None:
            self.candidate_title.setText(f"Pair “{s.candidate.name}” at {s.candidate.address}")
            self.fingerprint.setText(s.candidate.short_fingerprint)
            self.fingerprint.setToolTip(s.candidate.fingerprint)
        if s.step == WizardStep.DONE and s.paired is not None:
            self.code.clear()  # the code is not kept anywhere once used
            self.done_text.setText(f"“{s.paired.name}” is paired.")

    def _picked(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.wizard.choose(item.data(Qt.ItemDataRole.UserRole))

    def _look_up(self) -> None:
        asyncio.ensure_future(self.wizard.look_up(self.address.text()))

    def _pair(self) -> None:
        async def run() -> None:
            node = await self.wizard.pair(self.code.text())
            if node is not None:
                self.ctx.messages.emit(Message(f"Paired {node.name}"))
                await self.ctx.nodes.refresh()
                self.ctx.nodes.select(node.id)

        asyncio.ensure_future(run())

    def done(self, result: int) -> None:
        self._unsubscribe()
        self.code.clear()
        super().done(result)
