"""Requests: what happened to my request? Every /v1 request, live, with filters, and one in full:
the model asked and the one that answered, the node, the key, the status, the times and tokens, why it failed."""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QHideEvent, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.context import AppContext
from app.ui.widgets import (
    Card,
    StillComboBox,
    StillSpinBox,
    combo_box,
    filled_page,
    label,
    read_only_table,
    select_only,
)
from app.viewmodels.fleet import FleetSnapshot
from app.viewmodels.requests import (
    STATUSES,
    RequestsFilters,
    RequestsState,
    RequestsViewModel,
)
from daemon.api.access_log import millis, served_by, status_text, tokens
from daemon.api.models import RequestRecord

_LOGGER = logging.getLogger(__name__)

_STATUS_TITLES = {"": "Any status", "2xx": "Answered (2xx)", "4xx": "Refused (4xx)", "5xx": "Failed (5xx)"}
# Column, its width as the wider of its header and this sample text (None: it takes the rest, elided).
# The key is in the details and the filter: at 1024 px the model needs the room more.
COLUMNS: tuple[tuple[str, str | None], ...] = (
    ("Time", "00:00:00"), ("Status", "000"), ("Model", None), ("Node", "workstation"),
    ("TTFT", "000 ms"), ("Total", "00.0 s"), ("Tokens", "9999 + 999"))
_RIGHT_ALIGNED = (4, 5, 6)
DETAIL_FIELDS = (("request", "Request id"), ("time", "Time"), ("model", "Model asked"), ("served", "Answered by"),
                 ("node", "Node"), ("key", "API key"), ("status", "Status"), ("tokens", "Tokens"),
                 ("queue", "Queued"), ("ttft", "First token"), ("total", "Total"), ("path", "Path"))


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def model_text(row: RequestRecord) -> str:
    if row.model is None:
        return "—"
    return f"{row.model} → {row.answered_by}" if row.answered_by else row.model


class ElidedLabel(QLabel):
    """A value that never widens the page: cut with … to its width, whole in its tooltip and ``value``."""

    def __init__(self) -> None:
        super().__init__()
        self.value = ""
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(60)

    def set_value(self, text: str) -> None:
        self.value = text
        self.setToolTip(text)
        self._elide()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        self.setText(self.fontMetrics().elidedText(self.value, Qt.TextElideMode.ElideRight, max(0, self.width())))


class RequestsPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = RequestsViewModel(ctx.fleet)
        layout = filled_page(self, "Requests", "What happened to a request: every call to /v1, the model that "
                                               "answered, how long it took and why it failed.")
        layout.addLayout(self._filters())

        log = Card()
        self.table = self._table()
        self.table.setMinimumHeight(120)
        log.body.addWidget(self.table, 1)
        self.note = label("", muted=True, name="RequestsNote")
        log.body.addWidget(self.note)
        layout.addWidget(log, 1)  # the list takes what the details leave
        layout.addWidget(self._details())

        self._shown: tuple[RequestRecord, ...] | None = None
        self._selected_shown: str | None = None
        self._keys_shown: tuple[tuple[str, str], ...] | None = None
        self._models_shown: tuple[str, ...] | None = None
        self.vm.state.subscribe(self.show_state, now=True)
        ctx.fleet.snapshot.subscribe(self._show_models, now=True)

    # --- building -----------------------------------------------------------------------------
    def _filters(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.model = combo_box("RequestsModel", [("Any model", "")])
        self.key = combo_box("RequestsKey", [("Any key", "")])
        self.status = combo_box("RequestsStatus", [(_STATUS_TITLES[status], status) for status in STATUSES])
        self.slower = StillSpinBox()
        self.slower.setObjectName("RequestsSlower")
        self.slower.setRange(0, 600_000)
        self.slower.setSingleStep(500)
        self.slower.setSuffix(" ms")
        self.slower.setPrefix("slower than ")
        self.slower.setSpecialValueText("Any duration")
        self.slower.setToolTip("Only requests that took longer than this in all (0: any).")
        for combo in (self.model, self.key, self.status):
            combo.currentIndexChanged.connect(lambda _=0: self.apply_filters())
        self.slower.editingFinished.connect(self.apply_filters)
        for widget, stretch in ((self.model, 2), (self.key, 2), (self.status, 2), (self.slower, 2)):
            row.addWidget(widget, stretch)
        return row

    def _table(self) -> QTableWidget:
        table = read_only_table("RequestsTable", [name for name, _sample in COLUMNS])
        table.setWordWrap(False)
        table.setTextElideMode(Qt.TextElideMode.ElideRight)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # elided, never scrolled
        header = table.horizontalHeader()
        header.setMinimumSectionSize(40)
        header.setToolTip("TTFT: time to the first token, after the queue")
        cell, head = table.fontMetrics(), header.fontMetrics()
        for col, (name, sample) in enumerate(COLUMNS):
            if sample is None:
                header.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch)
                continue
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            table.setColumnWidth(col, max(cell.horizontalAdvance(sample) + 20, head.horizontalAdvance(name) + 28))
        table.itemSelectionChanged.connect(self._selection_changed)
        return table

    def _details(self) -> Card:
        card = Card("Request")
        find = QHBoxLayout()
        self.find_id = QLineEdit()
        self.find_id.setObjectName("RequestsFind")
        self.find_id.setClearButtonEnabled(True)
        self.find_id.setPlaceholderText("Find a request by its id (the X-Request-Id header of an answer)")
        self.find_id.returnPressed.connect(lambda: self.ctx.act(self.vm.open(self.find_id.text())))
        find.addWidget(self.find_id, 1)
        card.body.addLayout(find)
        self.heading = label("Select a request to see what happened to it.", muted=True, wrap=True)
        self.heading.setObjectName("RequestsHeading")
        card.body.addWidget(self.heading)
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(4)
        self.fields: dict[str, tuple[QLabel, ElidedLabel]] = {}
        for n, (key, title) in enumerate(DETAIL_FIELDS):
            name = label(title, muted=True)
            value = ElidedLabel()
            value.setObjectName(f"RequestsField-{key}")
            row, col = divmod(n, 2)
            grid.addWidget(name, row, col * 2)
            grid.addWidget(value, row, col * 2 + 1)
            self.fields[key] = (name, value)
        grid.setColumnStretch(1, 3)  # the left values hold the model ids: the longest
        grid.setColumnStretch(3, 2)
        card.body.addLayout(grid)
        self.failure = label("", wrap=True, selectable=True, name="RequestsFailure")
        self.failure.setTextFormat(Qt.TextFormat.PlainText)
        card.body.addWidget(self.failure)
        card.body.addStretch(1)
        return card

    # --- events -------------------------------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.vm.watch(True)  # live only while in view: every /v1 request writes a row

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.vm.watch(False)

    def filters(self) -> RequestsFilters:
        return RequestsFilters(model=str(self.model.currentData() or ""), key_id=str(self.key.currentData() or ""),
                               status=str(self.status.currentData() or ""), slower_than_ms=self.slower.value())

    def apply_filters(self) -> None:
        self.ctx.act(self.vm.set_filters(self.filters()))

    def _selection_changed(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        item = self.table.item(rows[0].row(), 0) if rows else None
        if item is not None:
            self.ctx.act(self.vm.open(str(item.data(Qt.ItemDataRole.UserRole))))

    # --- rendering ----------------------------------------------------------------------------
    def _show_models(self, snapshot: FleetSnapshot) -> None:
        models = tuple(sorted(view.definition.id for view in snapshot.models))
        if models != self._models_shown:
            self._models_shown = models
            _refill(self.model, "Any model", [(m, m) for m in models])

    def show_state(self, s: RequestsState) -> None:
        if s.key_names != self._keys_shown:
            self._keys_shown = s.key_names
            _refill(self.key, "Any key", [(kid, name) for kid, name in s.key_names])
        if s.rows != self._shown:
            self._shown = s.rows
            self._render_rows(s)
        elif s.selected != self._selected_shown:
            self._select(s, scroll=True)  # opened by id: bring its row into view
        if s.error:
            self.note.setText(f"Could not read the access log: {s.error}")
        elif not s.rows:
            self.note.setText("Loading…" if s.loading and self._shown is None else
                              "No requests match." if s.filters != RequestsFilters() else
                              "No /v1 requests yet: they show here as clients call the API.")
        else:
            self.note.setText(f"{len(s.rows)} most recent requests, newest first; updated live")
        self._render_detail(s)

    def _render_rows(self, s: RequestsState) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(s.rows))
        for row, record in enumerate(s.rows):
            cells = (_clock(record.ts), str(record.status), model_text(record), self._node(record),
                     millis(record.ttft_ms), millis(record.total_ms), tokens(record))
            tips = {0: _when(record.ts), 1: (record.error or status_text(record.status))[:500],
                    2: model_text(record), 3: self._node(record)}
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setData(Qt.ItemDataRole.UserRole, record.id)
                if col in tips:
                    item.setToolTip(tips[col])
                if col in _RIGHT_ALIGNED:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
        self.table.blockSignals(False)
        self._select(s)

    def _select(self, s: RequestsState, scroll: bool = False) -> None:
        """The row of the request shown in full, highlighted (none when it is not in the list)."""
        self._selected_shown = s.selected
        row = next((n for n, record in enumerate(s.rows) if record.id == s.selected), None)
        select_only(self.table, row)
        if row is not None and scroll:
            self.table.scrollToItem(self.table.item(row, 0))

    def _node(self, record: RequestRecord) -> str:
        """A node by its name (a paired node's id is 64 hex digits)."""
        if record.node is None:
            return "—"
        return record.node_name or self.ctx.nodes.name_of(record.node)

    def _render_detail(self, s: RequestsState) -> None:
        record = s.detail
        if record is None:
            self.heading.setText(s.detail_error or "Select a request to see what happened to it.")
            self.heading.setVisible(True)
            for _name, value in self.fields.values():
                value.set_value("")
            self.failure.setText("")
            return
        self.heading.setVisible(False)
        answered = served_by(record)
        values = {
            "request": record.id, "time": _when(record.ts), "path": record.path,
            "model": record.model or "— (refused before a model was chosen)",
            "served": (f"{answered} (a fallback)" if record.answered_by else answered) if answered else "—",
            "node": self._node(record) if record.node else "— (no node ran it)",
            "key": f"{s.key_name(record.key_id)} ({record.key_id})" if record.key_id and
                   s.key_name(record.key_id) != record.key_id else record.key_id or "none",
            "status": status_text(record.status), "tokens": tokens(record).replace(" + ", " prompt + ")
            + (" completion" if tokens(record) != "—" else ""),
            "queue": millis(record.queue_ms), "ttft": millis(record.ttft_ms), "total": millis(record.total_ms)}
        for key, (_name, value) in self.fields.items():
            value.set_value(values[key])
        self.failure.setText(_failure(record))


def _failure(record: RequestRecord) -> str:
    if not record.error:
        return ""
    if record.status >= 400:
        code, sep, reason = record.error.partition(": ")
        return f"Failed: {code} — {reason}" if sep and code.isidentifier() else f"Failed: {record.error}"
    return f"On the way: {record.error}"  # answered after a retry, or by a fallback


def _refill(combo: StillComboBox, anything: str, entries: list[tuple[str, str]]) -> None:
    """The combo's choices anew (data, title), keeping the current one (added when it is gone)."""
    current = str(combo.currentData() or "")
    combo.blockSignals(True)
    combo.clear()
    combo.addItem(anything, "")
    for data, title in entries:
        combo.addItem(title, data)
    if current and combo.findData(current) < 0:
        combo.addItem(current, current)  # a key revoked or a model removed since: still the filter
    combo.setCurrentIndex(max(0, combo.findData(current)))
    combo.blockSignals(False)
