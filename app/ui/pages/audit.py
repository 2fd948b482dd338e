"""Audit: who changed what — every admin action with its actor, and the change of the selected one."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.context import AppContext
from app.ui.widgets import (
    Card,
    StillSpinBox,
    button,
    combo_box,
    filled_page,
    fit_columns,
    label,
    line_edit,
    read_only_table,
    select_only,
)
from app.viewmodels.audit import ACTORS, AuditFilters, AuditState, AuditViewModel, diff
from daemon.api.audit import AuditEntry, summary

_ACTOR_TITLES = {"": "Anyone", "app": "The app", "ctl": "The command line", "admin token": "Admin token",
                 "system": "The daemon (system)"}
_SINCE_TITLES = {"": "Any time", "1h": "Last hour", "24h": "Last 24 hours", "7d": "Last 7 days",
                 "30d": "Last 30 days"}


def _time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _table(name: str, headers: list[str]) -> QTableWidget:
    table = read_only_table(name, headers)
    table.setWordWrap(False)
    return table


class AuditPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = AuditViewModel(ctx.fleet)
        layout = filled_page(self, "Audit", "Every change to models, keys, nodes and settings: who made it "
                                            "(the app, the command line, the daemon itself) and what changed.")

        filters = QHBoxLayout()
        self.action = line_edit("Action: model, key.revoke, …", name="AuditAction")
        self.actor = combo_box("AuditActor", [(_ACTOR_TITLES.get(actor, actor), actor) for actor in ACTORS])
        self.subject = line_edit("Subject: a model, key or node id", name="AuditSubject")
        self.since = combo_box("AuditSince", [(title, key) for key, title in _SINCE_TITLES.items()])
        for edit in (self.action, self.subject):
            edit.setClearButtonEnabled(True)
            edit.editingFinished.connect(self.apply_filters)
        for combo in (self.actor, self.since):
            combo.currentIndexChanged.connect(lambda _=0: self.apply_filters())
        filters.addWidget(self.action, 2)
        filters.addWidget(self.actor, 1)
        filters.addWidget(self.subject, 2)
        filters.addWidget(self.since, 1)
        layout.addLayout(filters)

        split = QSplitter(Qt.Orientation.Vertical)
        log = Card()
        self.table = _table("AuditTable", ["Time", "Who", "Action", "Subject", "What changed"])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        fit_columns(self.table, 4)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        log.body.addWidget(self.table, 1)
        bottom = QHBoxLayout()
        self.note = label("", muted=True, name="AuditNote")
        bottom.addWidget(self.note, 1)
        bottom.addWidget(label("Keep entries for", muted=True))
        self.retention = StillSpinBox()
        self.retention.setObjectName("AuditRetention")
        self.retention.setRange(1, 3650)
        self.retention.setSuffix(" days")
        self.retention.setEnabled(False)  # until the daemon's value is read
        self.retention.setToolTip("The daemon drops older entries (audit_retention_days).")
        self.retention.editingFinished.connect(self._retention_edited)
        bottom.addWidget(self.retention)
        self.older = button("Load older", name="AuditOlder", on_click=lambda: self.ctx.act(self.vm.load_older()))
        bottom.addWidget(self.older)
        log.body.addLayout(bottom)
        split.addWidget(log)

        change = Card("Change")
        self.heading = label("Select an entry to see what changed.", muted=True, wrap=True, selectable=True)
        self.heading.setObjectName("AuditHeading")
        change.body.addWidget(self.heading)
        self.diff = _table("AuditDiff", ["Field", "Before", "After"])
        self.diff.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        fit_columns(self.diff, 1, 2)
        change.body.addWidget(self.diff, 1)
        split.addWidget(change)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout.addWidget(split, 1)

        self._shown: tuple[AuditEntry, ...] | None = None
        self.vm.state.subscribe(self.show_state, now=True)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.vm.changed()  # entries may have been written while another page was open

    def filters(self) -> AuditFilters:
        return AuditFilters(action=self.action.text(), actor=str(self.actor.currentData() or ""),
                            subject=self.subject.text(), since=str(self.since.currentData() or ""))

    def apply_filters(self) -> None:
        self.ctx.act(self.vm.set_filters(self.filters()))

    def _retention_edited(self) -> None:
        days = self.retention.value()
        if days != self.vm.state.value.retention_days:
            self.ctx.act(self.vm.set_retention(days), f"Audit entries are kept {days} days")

    def _selection_changed(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        item = self.table.item(rows[0].row(), 0) if rows else None
        self.vm.select(item.data(Qt.ItemDataRole.UserRole) if item is not None else None)

    def show_state(self, s: AuditState) -> None:
        if s.entries != self._shown:
            self._shown = s.entries
            self._render_entries(s)
        if s.error:
            self.note.setText(f"Could not read the audit log: {s.error}")
        elif not s.entries:
            self.note.setText("Loading…" if s.loading else "No entries match." if s.filters != AuditFilters()
                              else "Nothing has been changed yet.")
        else:
            self.note.setText(f"{len(s.entries)} entries" + (", more are older" if s.more is not None else ""))
        self.older.setEnabled(s.more is not None)
        if s.retention_days is not None and not self.retention.hasFocus():
            self.retention.setEnabled(True)
            self.retention.setValue(s.retention_days)
        self._render_change(s.selected_entry)

    def _render_entries(self, s: AuditState) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(s.entries))
        selected_row = None
        for row, entry in enumerate(s.entries):
            cells = (_time(entry.ts), entry.actor, entry.action, self._subject(entry), summary(entry, 160))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setData(Qt.ItemDataRole.UserRole, entry.id)
                if col == 4:
                    item.setToolTip(summary(entry, 2000))
                self.table.setItem(row, col, item)
            if entry.id == s.selected:
                selected_row = row
        select_only(self.table, selected_row)
        self.table.blockSignals(False)

    def _subject(self, entry: AuditEntry) -> str:
        """A node by its name (its id is 64 hex digits, which made the page scroll sideways)."""
        subject = entry.subject or "—"
        if entry.action.startswith("node") and len(subject) == 64:
            return self.ctx.nodes.name_of(subject)
        return subject

    def _render_change(self, entry: AuditEntry | None) -> None:
        rows = diff(entry)
        if entry is None:
            self.heading.setText("Select an entry to see what changed.")
        else:
            where = f" {self._subject(entry)}" if entry.subject else ""
            extra = f" — {entry.detail}" if entry.detail else ""
            self.heading.setText(f"{entry.action}{where} by {entry.actor} at {_time(entry.ts)}{extra}"
                                 + ("" if rows else " (no snapshot recorded)"))
        self.diff.setRowCount(len(rows))
        for row, change in enumerate(rows):
            for col, text in enumerate((change.field, change.before, change.after)):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.diff.setItem(row, col, item)
