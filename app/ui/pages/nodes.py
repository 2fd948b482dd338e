"""Nodes: this machine and the paired ones (state, load, runtimes, GPUs, models, charts), agents
waiting to be paired, the pairing wizard, removing a node and rotating the daemon's CA."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import format as fmt
from app.context import AppContext
from app.ui.charts import LiveChart
from app.ui.pages.disk_card import DiskCard
from app.ui.pages.pair_dialog import PairDialog
from app.ui.widgets import (
    Card,
    StateBadge,
    button,
    combo_box,
    filled_page,
    label,
    set_prop,
    value_form,
)
from app.viewmodels.ca_rotation import CONFIRM_ROTATION, rotation_summary
from app.viewmodels.charts import NO_GPU, RANGES
from app.viewmodels.node_charts import (
    GPU,
    GPU_CHARTS,
    NODE,
    NODE_CHARTS,
    NodeChartsState,
)
from app.viewmodels.nodes import (
    BACKEND_CHOICES,
    BADGE,
    KEYS_ROW_NOTE,
    STATE_TEXT,
    NodesState,
    backend_summary,
    gpu_health,
    keys_warning,
    runtime_badges,
)
from daemon.api.ca_rotation import CaRotationResult
from daemon.api.contracts import short_fingerprint
from daemon.api.nodes import NodeView


def _ask(parent: QWidget, text: str) -> bool:
    return QMessageBox.question(parent, "MirbadLLM", text) == QMessageBox.StandardButton.Yes


def node_badge(node: NodeView) -> StateBadge:
    badge = StateBadge()
    badge.setText(STATE_TEXT[node.state])
    set_prop(badge, "badge", BADGE[node.state])
    return badge


class NodeRow(QWidget):
    def __init__(self, node: NodeView) -> None:
        super().__init__()
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 8, 12, 8)
        text = QVBoxLayout()
        text.setSpacing(1)
        name = label("This machine" if node.local else node.name)
        name.setStyleSheet("font-weight: 600;")
        detail = label(node.address or node.hostname or "local", muted=True)
        parts = [name, detail]
        if warning := keys_warning(node):  # its agent's key is a plain file: said here, why in the panel
            keys = label(KEYS_ROW_NOTE, role="error", name="NodeRowKeys")
            keys.setToolTip(warning)
            parts.append(keys)
        for part in parts:
            part.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            text.addWidget(part)
        row.addLayout(text, 1)
        row.addWidget(node_badge(node), 0, Qt.AlignmentFlag.AlignVCenter)


class RuntimeBadges(QWidget):
    """The node's runtimes as badges: available ones with their version, the others greyed with
    the node's reason as the tooltip."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("NodeRuntimes")
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(6)
        self.badges: list[QLabel] = []
        self.note = label("", muted=True)
        self.row.addWidget(self.note)
        self.row.addStretch(1)

    def show_node(self, node: NodeView) -> None:
        for badge in self.badges:
            self.row.removeWidget(badge)
            badge.deleteLater()
        self.badges = []
        shown = runtime_badges(node)
        self.note.setText("" if shown else "Not reported yet")
        self.note.setVisible(not shown)
        for n, item in enumerate(shown):
            badge = StateBadge()
            badge.setObjectName(f"runtime-{item.runtime}")
            badge.setText(item.text)
            badge.setToolTip(item.tooltip)
            badge.setEnabled(item.available)
            set_prop(badge, "badge", "ready" if item.available else "unknown")
            self.row.insertWidget(n, badge)
            self.badges.append(badge)


class NodePanel(QScrollArea):
    FIELDS = (("address", "Address"), ("system", "System"), ("cpu", "CPU"), ("memory", "Memory"),
              ("latency", "Status round trip"), ("paired", "Paired"), ("fingerprint", "Fingerprint"),
              ("id", "Node id"))

    def __init__(self, ctx: AppContext, confirm: Callable[[QWidget, str], bool]) -> None:
        super().__init__()
        self.ctx = ctx
        self.confirm = confirm
        self.node: NodeView | None = None
        self.setWidgetResizable(True)
        inner = QWidget()
        col = QVBoxLayout(inner)
        col.setContentsMargins(8, 0, 4, 0)
        head = QHBoxLayout()
        self.title = label("", role="figure")
        self.title.setStyleSheet("font-size: 20px;")
        self.badge = StateBadge()
        self.remove_button = button("Remove node", kind="danger", name="RemoveNode", on_click=self._remove)
        head.addWidget(self.title)
        head.addWidget(self.badge)
        head.addStretch(1)
        head.addWidget(self.remove_button)
        col.addLayout(head)
        self.reason = label("", role="error", wrap=True, name="NodeReason")
        col.addWidget(self.reason)
        self.keys = label("", role="error", wrap=True, selectable=True)  # keys at rest: a 0600 file, no keychain
        self.keys.setObjectName("NodeKeysWarning")
        self.keys.setVisible(False)
        col.addWidget(self.keys)
        details = Card("Machine")
        form, self.values = value_form(self.FIELDS, "node")
        self.runtimes = RuntimeBadges()
        form.addRow(label("Runtimes", muted=True), self.runtimes)
        backend = QWidget()
        backend_col = QVBoxLayout(backend)
        backend_col.setContentsMargins(0, 0, 0, 0)
        self.backend_choice = combo_box(
            "NodeBackendChoice", [(text, value) for value, text in BACKEND_CHOICES],
            tooltip="What llama.cpp computes on on this node. Models started from now on use it; "
                    "a running model keeps its backend until it restarts.")
        self.backend_choice.activated.connect(self._backend_chosen)
        self.backend_note = label("—", muted=True, wrap=True, selectable=True, name="NodeBackendNote")
        backend_col.addWidget(self.backend_choice, 0, Qt.AlignmentFlag.AlignLeft)
        backend_col.addWidget(self.backend_note)
        form.addRow(label("GPU backend", muted=True), backend)
        details.body.addLayout(form)
        col.addWidget(details)
        self.gpu_card = Card("GPUs")
        self.gpus = QTableWidget(0, 7)
        self.gpus.setObjectName("GpuTable")
        self.gpus.setHorizontalHeaderLabels(["GPU", "UUID", "Memory", "Use", "Temp.", "Power", "Health"])
        for section, tip in ((3, "Utilisation"), (4, "Temperature")):
            self.gpus.horizontalHeaderItem(section).setToolTip(tip)
        self.gpus.verticalHeader().setVisible(False)
        self.gpus.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.gpus.setWordWrap(True)  # Health wraps in the width the figures leave it (shown, not scrolled to)
        gpu_header = self.gpus.horizontalHeader()
        gpu_header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.gpus.setColumnHidden(1, True)  # a UUID is 40 characters: in the GPU's tooltip, not the panel's width
        gpu_header.setSectionResizeMode(6, QHeaderView.ResizeMode.Stretch)
        self.gpu_card.body.addWidget(self.gpus)
        col.addWidget(self.gpu_card)
        self.models_card = Card("Models placed here")
        self.models = label("", wrap=True, name="NodeModels")
        self.models_card.body.addWidget(self.models)
        col.addWidget(self.models_card)
        self.disk = DiskCard(ctx, lambda parent, text: self.confirm(parent, text))  # its model files, free space
        col.addWidget(self.disk)
        col.addWidget(self._charts_card())
        col.addStretch(1)
        self.setWidget(inner)
        ctx.node_charts.state.subscribe(self.show_charts)

    def _charts_card(self) -> Card:
        card = Card("Charts")
        bar = QHBoxLayout()
        self.range_buttons = QButtonGroup(self)
        for key, text in RANGES:
            b = button(text)
            b.setCheckable(True)
            b.setObjectName(f"node-range-{key}")
            b.clicked.connect(lambda _=False, k=key: self.ctx.node_charts.set_range(k))
            self.range_buttons.addButton(b)
            bar.addWidget(b)
        bar.addStretch(1)
        self.gpu_pick = combo_box("GpuPick")
        self.gpu_pick.activated.connect(lambda _i: self.ctx.node_charts.set_gpu(self.gpu_pick.currentData()))
        bar.addWidget(self.gpu_pick)
        card.body.addLayout(bar)
        grid = QGridLayout()
        self.charts: list[LiveChart] = []
        for i, spec in enumerate(NODE_CHARTS + GPU_CHARTS):
            chart = LiveChart(spec.title, spec.unit, [legend for _key, legend in spec.series])
            chart.setMinimumHeight(160)
            grid.addWidget(chart, i // 2, i % 2)
            self.charts.append(chart)
        card.body.addLayout(grid)
        return card

    def show_node(self, node: NodeView | None) -> None:
        self.node = node
        if node is None:
            self.title.setText("No node selected")
            self.remove_button.setVisible(False)
            self.keys.setVisible(False)
            return
        self.title.setText("This machine" if node.local else node.name)
        self.badge.setText(STATE_TEXT[node.state])
        set_prop(self.badge, "badge", BADGE[node.state])
        self.remove_button.setVisible(not node.local)
        self.reason.setText(node.reason or "")
        self.reason.setVisible(bool(node.reason))
        warning = keys_warning(node)
        self.keys.setText(f"This node's agent: {warning}" if warning else "")
        self.keys.setVisible(bool(warning))
        v = self.values
        v["address"].setText(node.address or "this machine")
        v["system"].setText(" · ".join(p for p in (node.hostname, node.os, node.arch, node.version and
                                                   f"agent {node.version}") if p) or "—")
        v["cpu"].setText(f"{node.cpu_count or '—'} cores · {fmt.percent(node.cpu_percent)} busy")
        v["memory"].setText(f"{fmt.size(node.memory_available)} free of {fmt.size(node.memory_total)}")
        v["latency"].setText(f"{node.latency_ms:.0f} ms" if node.latency_ms is not None else "—")
        v["paired"].setText(fmt.when(node.paired_at) if node.paired_at else "—")
        v["fingerprint"].setText(short_fingerprint(node.fingerprint) if node.fingerprint else "—")
        v["id"].setText(node.id)
        self.runtimes.show_node(node)
        index = self.backend_choice.findData(node.backend_choice)
        if index >= 0 and not self.backend_choice.view().isVisible():
            self.backend_choice.setCurrentIndex(index)
        self.backend_note.setText(backend_summary(node))
        self._render_gpus(node)
        self.disk.show_node(node.id)
        self.show_charts(self.ctx.node_charts.state.value)  # a node without a GPU: its GPU charts say so
        names = {m.definition.id: m for m in self.ctx.fleet.snapshot.value.models}
        self.models.setText("\n".join(
            f"{names[m].definition.served_name} — {fmt.STATE_TEXT[names[m].status.state]}" if m in names else m
            for m in node.models) or "No model is placed on this node.")
        gpus = [(f"GPU {g.index} · {g.name}", g.uuid or str(g.index)) for g in node.gpus]
        if [self.gpu_pick.itemData(i) for i in range(self.gpu_pick.count())] != [None] + [k for _t, k in gpus]:
            self.gpu_pick.clear()
            self.gpu_pick.addItem("No GPU charts", None)
            for text, key in gpus:
                self.gpu_pick.addItem(text, key)

    def _render_gpus(self, node: NodeView) -> None:
        self.gpu_card.setVisible(bool(node.gpus))
        self.gpus.setRowCount(len(node.gpus))
        for row, g in enumerate(node.gpus):
            cells = (f"{g.index} · {g.name}", g.uuid or "—",
                     f"{fmt.size(g.memory_used).removesuffix(' GiB')} / {fmt.size(g.memory_total)}",
                     fmt.percent(g.utilization_percent),
                     f"{g.temperature_c:.0f} °C" if g.temperature_c is not None else "—",
                     f"{g.power_w:.0f} W" if g.power_w is not None else "—", gpu_health(g))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip({0: f"UUID {g.uuid}" if g.uuid else "", 6: text}.get(col, ""))
                self.gpus.setItem(row, col, item)
        self.gpus.resizeRowsToContents()
        rows = sum(self.gpus.rowHeight(r) for r in range(self.gpus.rowCount()))
        self.gpus.setFixedHeight(self.gpus.horizontalHeader().height() + rows + 2 * self.gpus.frameWidth() + 2)

    def show_charts(self, s: NodeChartsState) -> None:
        for b in self.range_buttons.buttons():
            b.setChecked(b.objectName() == f"node-range-{s.range}")
        gpu_chosen = s.subject is not None and s.subject.gpu is not None
        charted = [(NODE, spec) for spec in NODE_CHARTS] + [(GPU, spec) for spec in GPU_CHARTS]
        for chart, (group, spec) in zip(self.charts, charted):
            plot = s.plot(group)
            chart.setVisible(group == NODE or gpu_chosen)
            no_gpu = spec.needs_gpu and self.node is not None and not self.node.gpus
            chart.set_message(NO_GPU if no_gpu else None)
            chart.set_data(plot.ts, plot.lines(spec))

    def _backend_chosen(self, _index: int) -> None:
        node, choice = self.node, self.backend_choice.currentData()
        if node is None or choice == node.backend_choice:
            return
        name = "this machine" if node.local else node.name
        text = dict(BACKEND_CHOICES)[choice].split(" (")[0]
        self.ctx.act(self.ctx.nodes.set_backend(node.id, choice),
                     f"{name}: models started from now on use {text}")
        # A refusal leaves the choice as it was: the next refresh shows the node's own.
        self.backend_choice.setCurrentIndex(self.backend_choice.findData(node.backend_choice))

    def _remove(self) -> None:
        node = self.node
        if node is None or node.local:
            return
        if self.confirm(self, f"Remove “{node.name}”? Its models are stopped, its agent forgets this daemon "
                              "and shows a new pairing code; its certificate is refused from now on."):
            self.ctx.act(self.ctx.nodes.remove(node.id), f"Removed {node.name}")


class NodesPage(QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = ctx.nodes
        self.confirm: Callable[[QWidget, str], bool] = _ask  # tests answer for the user
        self.dialog: PairDialog | None = None
        layout = filled_page(self, "Nodes", "Machines that run models for this daemon. Start `mirbadllm agent` "
                                            "on another computer, then pair it here.")
        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        left_col = QVBoxLayout(left)
        left_col.setContentsMargins(0, 0, 8, 0)
        self.pair_button = button("Pair a node", kind="primary", icon="action-add", color="#FFFFFF", name="PairNode",
                                  on_click=lambda: self.open_pairing())
        left_col.addWidget(self.pair_button)
        self.rotate_button = button("Rotate CA", icon="action-restart", name="RotateCa")
        self.rotate_button.setToolTip("A new certificate authority for every node; the old one is retired")
        self.rotate_button.clicked.connect(lambda: self.rotate_ca())
        left_col.addWidget(self.rotate_button)
        self.rotation_note = label("", wrap=True, selectable=True)  # the last rotation's result
        self.rotation_note.setObjectName("CaRotationResult")
        self.rotation_note.setVisible(False)
        left_col.addWidget(self.rotation_note)
        self.list = QListWidget()
        self.list.setObjectName("NodeList")
        self.list.currentItemChanged.connect(self._item_chosen)
        left_col.addWidget(self.list, 1)
        self.waiting = Card("Waiting to be paired")
        self.waiting_rows = QVBoxLayout()
        self.waiting.body.addLayout(self.waiting_rows)
        left_col.addWidget(self.waiting)
        split.addWidget(left)
        self.panel = NodePanel(ctx, lambda parent, text: self.confirm(parent, text))
        split.addWidget(self.panel)
        split.setSizes([300, 900])
        left.setMinimumWidth(260)
        layout.addWidget(split, 1)
        self._rendering = False
        self.vm.state.subscribe(self.show_state, now=True)

    def show_state(self, s: NodesState) -> None:
        self._rendering = True
        try:
            self.list.clear()
            for node in s.nodes:
                item = QListWidgetItem()
                item.setData(Qt.ItemDataRole.UserRole, node.id)
                row = NodeRow(node)
                item.setSizeHint(QSize(0, row.sizeHint().height()))
                self.list.addItem(item)
                self.list.setItemWidget(item, row)
                if node.id == s.selected_id:
                    self.list.setCurrentItem(item)
        finally:
            self._rendering = False
        self._render_waiting(s)
        self.panel.show_node(s.selected)
        if self.dialog is not None:
            self.dialog.show_discovered(s.discovered)
        self._follow()

    def _render_waiting(self, s: NodesState) -> None:
        while self.waiting_rows.count():
            child = self.waiting_rows.takeAt(0)
            if child.widget():
                child.widget().deleteLater()
        self.waiting.setVisible(bool(s.discovered))
        for entry in s.discovered:
            row = QWidget()
            line = QHBoxLayout(row)
            line.setContentsMargins(0, 2, 0, 2)
            line.addWidget(label(f"{entry.name}\n{entry.address}\n{entry.short_fingerprint}", wrap=True), 1)
            pair = button("Pair")
            pair.setObjectName(f"pair-{entry.fingerprint[:12]}")
            pair.clicked.connect(lambda _=False, e=entry: self.open_pairing(e))
            line.addWidget(pair)
            self.waiting_rows.addWidget(row)

    def rotate_ca(self) -> None:
        """Ask, then rotate; the result (or the daemon's refusal) is shown under the button."""
        if not self.confirm(self, CONFIRM_ROTATION):
            return
        self.rotate_button.setEnabled(False)
        future = self.ctx.act(self.vm.rotate_ca())
        future.add_done_callback(lambda f: self._rotated(f.result() if not f.cancelled() else None))

    def _rotated(self, result: CaRotationResult | None) -> None:
        self.rotate_button.setEnabled(True)
        if result is not None:
            self.rotation_note.setText(rotation_summary(result))
            set_prop(self.rotation_note, "role", "" if result.retired and not result.offline else "error")
            self.rotation_note.setVisible(True)

    def open_pairing(self, entry: object = None) -> PairDialog:
        dialog = PairDialog(self.ctx, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show_discovered(self.vm.state.value.discovered)
        dialog.finished.connect(lambda _r: setattr(self, "dialog", None))
        self.dialog = dialog
        if entry is not None:
            self.ctx.pairing.choose(entry)  # type: ignore[arg-type]
        dialog.open()  # not exec(): a nested loop would re-enter asyncio
        return dialog

    def _item_chosen(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if not self._rendering and item is not None:
            self.vm.select(item.data(Qt.ItemDataRole.UserRole))

    def _follow(self) -> None:
        node = self.vm.state.value.selected if self.isVisible() else None
        if node is None:
            self.ctx.node_charts.hide()
        else:
            self.ctx.node_charts.show(node.id, self.panel.gpu_pick.currentData())

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().showEvent(event)
        self.vm.show()
        self._follow()

    def hideEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().hideEvent(event)
        self.vm.hide()
        self.ctx.node_charts.hide()
