"""The Nodes page's Disk card: a node's model files with size and used-by, the disk's free space,
and "Remove unused files", asked first with the space it frees (``app.viewmodels.disk``)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app import format as fmt
from app.context import AppContext, Message
from app.ui.widgets import Card, button, fit_columns, label
from app.viewmodels.disk import DiskState, shown_path, used_by_text

MAX_ROWS_SHOWN = 8  # then the table scrolls inside the card


class DiskCard(Card):
    def __init__(self, ctx: AppContext, confirm: Callable[[QWidget, str], bool]) -> None:
        super().__init__("Disk")
        self.setObjectName("DiskCard")
        self.ctx = ctx
        self.confirm = confirm
        self.node_id: str | None = None
        self.summary = label("", wrap=True, selectable=True, name="DiskSummary")
        self.body.addWidget(self.summary)
        row = QHBoxLayout()
        self.folder = label("", muted=True, selectable=True, name="DiskFolder")
        self.folder.setWordWrap(True)
        row.addWidget(self.folder, 1)
        self.refresh_button = button("Refresh", name="DiskRefresh", on_click=self._refresh)
        self.remove_unused_button = button("Remove unused files", kind="danger", name="RemoveUnusedFiles")
        self.remove_unused_button.setToolTip("Delete the files in this node's models folder that no model uses")
        self.remove_unused_button.clicked.connect(self._remove_unused)
        row.addWidget(self.refresh_button)
        row.addWidget(self.remove_unused_button)
        self.body.addLayout(row)
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("DiskFiles")
        self.table.setHorizontalHeaderLabels(["File", "Size", "Used by"])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setWordWrap(False)
        fit_columns(self.table, 0)  # long names elide, whole in the tooltip
        self.body.addWidget(self.table)
        ctx.disk.state.subscribe(self.show_state, now=True)

    def show_node(self, node_id: str | None) -> None:
        """Read a node's folder when the panel turns to it while shown (not on every refresh of the fleet)."""
        if node_id is not None and node_id != self.node_id:
            self.node_id = node_id
            if self.isVisible():
                self._refresh()

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().showEvent(event)
        self._refresh()  # each time the page opens: files come and go while it is away

    def _refresh(self) -> None:
        if self.node_id is not None:
            self.ctx.act(self.ctx.disk.load(self.node_id))

    def show_state(self, s: DiskState) -> None:
        self.summary.setText(s.summary)
        listing = s.listing if s.node_id == self.node_id else None
        self.folder.setText(f"Models folder: {listing.models_dir}" if listing else "")
        files = listing.files if listing is not None else []
        self.table.setRowCount(len(files))
        for row, f in enumerate(files):
            cells = (shown_path(f, listing.models_dir) if listing else f.path, fmt.size(f.size), used_by_text(f))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{f.path}\nModified {fmt.when(f.mtime)}" if col == 0 else text)
                if f.unused:
                    item.setForeground(self.palette().placeholderText())
                self.table.setItem(row, col, item)
        self.table.setVisible(bool(files))
        self.table.resizeRowsToContents()
        shown = sum(self.table.rowHeight(r) for r in range(min(len(files), MAX_ROWS_SHOWN)))
        self.table.setFixedHeight(self.table.horizontalHeader().height() + shown + 2 * self.table.frameWidth() + 2)
        unused = s.unused
        self.remove_unused_button.setEnabled(bool(unused) and not s.busy and not s.loading)
        self.remove_unused_button.setText(f"Remove unused files ({fmt.size(s.listing.unused_bytes)})"
                                          if unused and s.listing is not None else "Remove unused files")

    def _remove_unused(self) -> None:
        s = self.ctx.disk.state.value
        if not s.unused:
            return
        if self.confirm(self, s.unused_question):
            async def run() -> None:
                self.ctx.messages.emit(Message(await self.ctx.disk.remove_unused()))

            self.ctx.act(run())
