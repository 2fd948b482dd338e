"""Discover: find a model to run. A search of the Hugging Face hub (name, downloads, likes, updated),
a repository's quants with their sizes, "Will it fit?" on each online node, and Download, which starts
the daemon's download (the model is added when it is done); with the search box empty, the curated
catalog, each entry marked with whether it fits this machine. Fits 1024×700: two columns, the lists
scroll, nothing else does."""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import Qt
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QWidget,
)

from app.context import AppContext
from app.ui.widgets import (
    Card,
    button,
    combo_box,
    filled_page,
    fit_columns,
    label,
    read_only_table,
)
from app.viewmodels.discover import DiscoverState, DiscoverViewModel
from app.viewmodels.fleet import FleetSnapshot
from daemon.api.hub import MACHINE_CLASSES, CatalogItem, HubRepo, QuantVariant

_LOGGER = logging.getLogger(__name__)

_FIT_TEXT = {"fits": "✓ fits", "tight": "~ tight", "too_big": "✗ too big", "unknown": "?"}
_CLASS_TITLES = {key: f"Picked for a machine with {title} of memory" for key, title, _bound in MACHINE_CLASSES}
_CLASS_SHORT = {"8gb": "≤ 8 GB", "16gb": "8–16 GB", "32gb": "16–32 GB", "more": "32+ GB"}


def size_text(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def count_text(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.0f}k" if n >= 1000 else str(n)


def _item(text: str, tip: str = "", right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if tip:
        item.setToolTip(tip)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def _columns(table: QTableWidget, stretch: int) -> None:
    fit_columns(table, stretch)
    table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
    table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
    table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)


class DiscoverPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = DiscoverViewModel(ctx.fleet)
        layout = filled_page(self, "Discover", "Find a model on Hugging Face, see whether it fits, and download "
                                               "it. With the search box empty: models picked for you.")
        row = QHBoxLayout()
        self.search = QLineEdit()
        self.search.setObjectName("DiscoverSearch")
        self.search.setPlaceholderText("Search Hugging Face for GGUF models, e.g. qwen3 8b")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self._search)
        self.search.textChanged.connect(lambda text: None if text.strip() else self._search())
        self.search_button = button("Search", kind="primary", on_click=self._search)
        row.addWidget(self.search, 1)
        row.addWidget(self.search_button)
        layout.addLayout(row)

        columns = QHBoxLayout()
        columns.setSpacing(14)
        columns.addWidget(self._list_card(), 1)
        detail = self._detail_card()
        detail.setFixedWidth(290)  # the list takes the rest: repository names are long
        columns.addWidget(detail)
        layout.addLayout(columns, 1)

        self._entries: tuple[CatalogItem, ...] = ()
        self._repos: tuple[HubRepo, ...] = ()
        self._quants: tuple[QuantVariant, ...] = ()
        self.vm.state.subscribe(self.show_state, now=True)
        ctx.fleet.snapshot.subscribe(self._show_nodes, now=True)

    # --- building -----------------------------------------------------------------------------
    def _list_card(self) -> Card:
        card = Card()
        self.list_title = label("", role="CardTitle", name="DiscoverListTitle")
        card.body.addWidget(self.list_title)
        self.lists = QStackedWidget()
        self.catalog = read_only_table("DiscoverCatalog", ["Name", "Size", "Here", "For"])
        self.catalog.setWordWrap(False)
        _columns(self.catalog, 0)
        self.catalog.currentCellChanged.connect(lambda row, *_: self._open_entry(row))
        self.results = read_only_table("DiscoverResults", ["Repository", "Downloads", "Likes", "Updated"])
        _columns(self.results, 0)
        self.results.currentCellChanged.connect(lambda row, *_: self._open_repo(row))
        self.lists.addWidget(self.catalog)
        self.lists.addWidget(self.results)
        card.body.addWidget(self.lists, 1)
        self.list_note = label("", muted=True, wrap=True, name="DiscoverNote")
        card.body.addWidget(self.list_note)
        return card

    def _detail_card(self) -> Card:
        card = Card()
        self.repo_title = label("Pick a model on the left", role="CardTitle", name="DiscoverRepo")
        self.repo_title.setWordWrap(True)
        card.body.addWidget(self.repo_title)
        self.repo_note = label("", muted=True, wrap=True, name="DiscoverRepoNote")
        card.body.addWidget(self.repo_note)
        self.quants = read_only_table("DiscoverQuants", ["Quant", "Size"])
        _columns(self.quants, 0)
        self.quants.currentCellChanged.connect(lambda *_: self._quant_picked())
        card.body.addWidget(self.quants, 1)
        self.node = combo_box("DiscoverNode", tooltip="The node that downloads it (and runs it)")
        card.body.addWidget(self.node)
        actions = QHBoxLayout()
        self.fit_button = button("Will it fit?", name="DiscoverFit", on_click=self._check_fit)
        self.download_button = button("Download", kind="primary", name="DiscoverDownload", on_click=self._download)
        actions.addWidget(self.fit_button)
        actions.addStretch(1)
        actions.addWidget(self.download_button)
        card.body.addLayout(actions)
        self.fit_note = QLabel("")
        self.fit_note.setObjectName("DiscoverFitNote")
        self.fit_note.setWordWrap(True)
        self.fit_note.setTextFormat(Qt.TextFormat.PlainText)
        card.body.addWidget(self.fit_note)
        self.status = label("", muted=True, wrap=True, name="DiscoverStatus")
        card.body.addWidget(self.status)
        return card

    # --- actions ------------------------------------------------------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self.vm.state.value.catalog is None:
            asyncio.ensure_future(self.vm.load_catalog())

    def _search(self) -> None:
        asyncio.ensure_future(self.vm.search(self.search.text()))

    def _open_repo(self, row: int) -> None:
        if 0 <= row < len(self._repos) and self._repos[row].id != self.vm.state.value.repo:
            asyncio.ensure_future(self.vm.open_repo(self._repos[row].id))

    def _open_entry(self, row: int) -> None:
        if 0 <= row < len(self._entries) and self._entries[row].repo != self.vm.state.value.repo:
            self.vm.open_entry(self._entries[row])

    def selected_quant(self) -> QuantVariant | None:
        row = self.quants.currentRow()
        return self._quants[row] if 0 <= row < len(self._quants) else None

    def _quant_picked(self) -> None:
        quant = self.selected_quant()
        self.fit_button.setEnabled(quant is not None)
        self.download_button.setEnabled(quant is not None)

    def _check_fit(self) -> None:
        quant, repo = self.selected_quant(), self.vm.state.value.repo
        if quant is not None and repo is not None:
            asyncio.ensure_future(self.vm.check_fit(repo, quant.file))

    def _download(self) -> None:
        quant, repo = self.selected_quant(), self.vm.state.value.repo
        if quant is None or repo is None:
            return
        entry = next((e for e in self._entries if e.repo == repo and e.file == quant.file), None)
        node = str(self.node.currentData() or "local")
        asyncio.ensure_future(self.vm.download(repo, quant.file, node, entry))

    # --- rendering ----------------------------------------------------------------------------
    def _show_nodes(self, snap: FleetSnapshot) -> None:
        nodes = [(h.node, h.node_name or ("This machine" if h.node == "local" else h.node[:12]))
                 for h in snap.hosts if h.online] or [("local", "This machine")]
        if [self.node.itemData(i) for i in range(self.node.count())] == [n for n, _ in nodes]:
            return
        current = self.node.currentData()
        self.node.clear()
        for node, name in nodes:
            self.node.addItem(name, node)
        self.node.setCurrentIndex(max(0, self.node.findData(current)))

    def show_state(self, s: DiscoverState) -> None:
        searching = bool(s.query)
        self.lists.setCurrentWidget(self.results if searching else self.catalog)
        if searching:
            self.list_title.setText(f"Searching for “{s.query}”…" if s.searching else f"Results for “{s.query}”")
            self._fill_results(s.results)
            self.list_note.setText(s.message or "")
        else:
            self.list_title.setText("Picked for you")
            self._fill_catalog(s)
        self._show_repo(s)

    def _fill_catalog(self, s: DiscoverState) -> None:
        entries = tuple(s.catalog.entries) if s.catalog else ()
        if s.catalog and s.catalog.memory:
            where = "GPU memory" if s.catalog.memory_kind == "gpu" else "memory"
            self.list_note.setText(f"This machine: {size_text(s.catalog.memory)} of {where}. Download one, or "
                                   "use its name: mirbadllm run NAME.")
        else:
            self.list_note.setText(s.catalog_error or ("Loading the catalog…" if s.catalog is None else ""))
        if entries == self._entries:
            return
        self._entries = entries
        self.catalog.setRowCount(len(entries))
        for row, e in enumerate(entries):
            self.catalog.setItem(row, 0, _item(e.name, f"{e.title}: {e.why}\n{e.repo} · {e.file}"))
            self.catalog.setItem(row, 1, _item(size_text(e.size), right=True))
            self.catalog.setItem(row, 2, _item(_FIT_TEXT[e.fit], e.fit_note))
            self.catalog.setItem(row, 3, _item(_CLASS_SHORT[e.machine], _CLASS_TITLES[e.machine]))

    def _fill_results(self, repos: tuple[HubRepo, ...]) -> None:
        if repos == self._repos:
            return
        self._repos = repos
        self.results.setRowCount(len(repos))
        for row, r in enumerate(repos):
            owner, _, name = r.id.partition("/")
            self.results.setItem(row, 0, _item(f"{name}\n{owner}" + (" · gated" if r.gated else ""), r.id))
            self.results.setItem(row, 1, _item(count_text(r.downloads), right=True))
            self.results.setItem(row, 2, _item(count_text(r.likes), right=True))
            self.results.setItem(row, 3, _item(r.updated.strftime("%Y-%m-%d") if r.updated else "—"))
        self.results.resizeRowsToContents()

    def _show_repo(self, s: DiscoverState) -> None:
        self.repo_title.setText(s.repo or "Pick a model on the left")
        files = s.files
        notes = [n for n in (s.files_error, files.note if files else None) if n]
        if s.loading_files:
            notes.append("Reading its files…")
        if files and files.projectors:
            notes.append(f"Reads images: its vision projector ({size_text(files.projectors[0].size)}) comes "
                         "with the download.")
        self.repo_note.setText("\n".join(notes))
        quants = tuple(files.quants) if files else ()
        if quants != self._quants:
            self._quants = quants
            self.quants.setRowCount(len(quants))
            for row, q in enumerate(quants):
                parts = f" · {len(q.files)} parts" if len(q.files) > 1 else ""
                self.quants.setItem(row, 0, _item(q.quant, q.file))
                self.quants.setItem(row, 1, _item(size_text(q.size) + parts, right=True))
            entry = next((e for e in self._entries if e.repo == s.repo), None)
            pick = next((i for i, q in enumerate(quants) if entry and q.file == entry.file), 0 if quants else -1)
            self.quants.setCurrentCell(pick, 0)
        self._quant_picked()
        self.fit_note.setText(self._fit_text(s))
        self.status.setText(s.download_error or s.downloaded or "")

    @staticmethod
    def _fit_text(s: DiscoverState) -> str:
        if s.checking:
            return f"Asking each node whether {s.fit_file} fits…"
        if not s.fits:
            return ""
        marks = {True: "✓", False: "✗", None: "?"}
        return "\n".join(f"{marks[f.fits]} {f.node_name}: {f.text}" for f in s.fits)
