"""Downloads: every transfer the daemon owns (hub and URL downloads, Ollama, LM Studio and folder
imports, mirror pushes to a node) with its progress, speed and time left; pause, resume, cancel,
and retry of a failed one, whose reason is shown. The list is the daemon's (``app.viewmodels.downloads``),
so it outlives the add-model dialog and the app."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QProgressBar,
    QScrollArea,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext
from app.ui.widgets import (
    Card,
    ReadOnShow,
    bind,
    button,
    label,
    page,
    page_header,
    read_only_table,
    select_only,
    set_prop,
)
from app.viewmodels.downloads import (
    DownloadsState,
    DownloadsViewModel,
    actions,
    fraction,
    in_flight,
    progress_text,
    row_cells,
)
from daemon.api.sources import Transfer

COLUMNS = ["Download", "Kind", "Node", "Progress", "Size", "State", "Speed", "Time left"]
PROGRESS_COLUMN, STATE_COLUMN = 3, 5
VERBS = (("pause", "Pause"), ("resume", "Resume"), ("cancel", "Cancel"), ("retry", "Retry"))
NOTE = ("A paused download or mirror push keeps the part it has; Resume goes on from there. Cancel deletes the part. "
        "Downloads go on when the add-model dialog or this app closes: the daemon runs them.")


class DownloadsPage(ReadOnShow, QScrollArea):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = DownloadsViewModel(ctx.client, ctx.fleet)
        vm = self.vm
        self.destroyed.connect(lambda *_: vm.close())
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Downloads", "Models coming to your nodes: from the hub, from Ollama or "
                                                  "LM Studio, and pushed from this machine."))
        layout.addWidget(self._transfers_card(), 1)
        self._shown: tuple[tuple[Transfer, ...], dict[str, str]] | None = None
        bind(self, self.vm.state, self.show_state)
        self.show_state(self.vm.state.value)

    def _transfers_card(self) -> Card:
        card = Card("Transfers")
        card.body.addWidget(label(NOTE, muted=True, wrap=True))
        self.table = read_only_table("DownloadsTable", COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.table.horizontalHeader()
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(STATE_COLUMN, QHeaderView.ResizeMode.Stretch)  # a failure's reason: in full below
        for col, width in ((0, 230), (PROGRESS_COLUMN, 90)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            self.table.setColumnWidth(col, width)
        self.table.setMinimumHeight(240)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        card.body.addWidget(self.table, 1)
        self.detail = label("", wrap=True, selectable=True, name="DownloadsDetail")
        card.body.addWidget(self.detail)
        row = QHBoxLayout()
        self.note = label("", muted=True, wrap=True, name="DownloadsNote")
        row.addWidget(self.note, 1)
        self.buttons = {}
        for verb, text in VERBS:
            b = button(text, kind="primary" if verb in ("resume", "retry") else None)
            b.setObjectName(f"Downloads{text}")
            b.clicked.connect(lambda _checked=False, v=verb: self._act(v))
            row.addWidget(b)
            self.buttons[verb] = b
        card.body.addLayout(row)
        return card

    def _act(self, verb: str) -> None:
        selected = self.vm.state.value.selected
        if selected is not None:
            self.ctx.act(getattr(self.vm, verb)(selected))

    def _selection_changed(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        item = self.table.item(rows[0].row(), 0) if rows else None
        self.vm.select(item.data(Qt.ItemDataRole.UserRole) if item is not None else None)

    def show_state(self, s: DownloadsState) -> None:
        if (s.transfers, s.node_names) != self._shown:
            self._shown = (s.transfers, s.node_names)
            self._render_rows(s)
        t = s.selected_transfer
        allowed = actions(t)
        for verb, b in self.buttons.items():
            b.setEnabled(verb in allowed)
        self.detail.setText(self._detail(t))
        self.detail.setVisible(t is not None)
        if s.error:
            self.note.setText(s.error)
        elif not s.transfers:
            self.note.setText("Loading…" if not s.loaded else "Nothing downloaded yet: Models → Add model starts one.")
        else:
            self.note.setText(f"{len(s.transfers)} transfer{'' if len(s.transfers) == 1 else 's'}, {s.running} running")
        set_prop(self.note, "role", "error" if s.error else "")

    def _render_rows(self, s: DownloadsState) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(s.transfers))
        selected_row = None
        for row, t in enumerate(s.transfers):
            label_, kind, node, state, speed, eta = row_cells(t, s.node_names)
            for col, text in enumerate((label_, kind, node, "", progress_text(t), state, speed, eta)):
                item = QTableWidgetItem(text)
                if col == 0:
                    item.setData(Qt.ItemDataRole.UserRole, t.id)
                    item.setToolTip(t.label)
                if col == STATE_COLUMN and t.error:
                    item.setToolTip(t.error)
                self.table.setItem(row, col, item)
            self.table.setCellWidget(row, PROGRESS_COLUMN, self._bar(t))
            if t.id == s.selected:
                selected_row = row
        select_only(self.table, selected_row)
        self.table.blockSignals(False)

    @staticmethod
    def _bar(t: Transfer) -> QWidget:
        cell = QWidget()
        box = QVBoxLayout(cell)
        box.setContentsMargins(4, 0, 4, 0)
        bar = QProgressBar()
        bar.setObjectName("DownloadsProgress")
        bar.setRange(0, 1000)
        done = fraction(t)
        if done is None:
            bar.setRange(0, 0 if in_flight(t) else 1000)
        else:
            bar.setValue(int(done * 1000))
        bar.setTextVisible(False)
        box.addWidget(bar, 0, Qt.AlignmentFlag.AlignVCenter)
        return cell

    @staticmethod
    def _detail(t: Transfer | None) -> str:
        if t is None:
            return ""
        lines = [f"{t.label} · transfer {t.id} (`mirbadllm ctl downloads` names it so)"]
        if t.error:
            lines.append(f"Failed: {t.error}. Retry runs it again.")
        if t.register_error:
            lines.append(f"Not added: {t.register_error}")
        if t.registered:
            lines.append("Added as " + ", ".join(t.registered))
        if t.files:
            lines.append("Files: " + ", ".join(t.files[:6]) + (" …" if len(t.files) > 6 else ""))
        return "\n".join(lines)
