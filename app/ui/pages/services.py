"""Services: a node's own OS services (systemd, launchd, Windows services), started, stopped and
restarted where the node's whitelist allows; a protected one only after its name is typed. With
every service shown, one not whitelisted may be allowed on this node (the daemon's whitelist), and
one the daemon whitelists removed from it; a system one on the deny list says why and offers nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.context import AppContext, Message
from app.ui.widgets import (
    Card,
    ReadOnShow,
    bind,
    button,
    combo_box,
    fit_columns,
    label,
    line_edit,
    page,
    page_header,
    read_only_table,
    set_prop,
)
from app.viewmodels.services import (
    STATE_LABELS,
    ServicesState,
    ServicesViewModel,
    actions_for,
    verdict,
)
from daemon.api.nodes import NodeView
from daemon.api.services import ServiceAction, ServiceInfo, ServiceState

BADGES = {ServiceState.RUNNING: "ready", ServiceState.STOPPED: "stopped", ServiceState.STARTING: "starting",
          ServiceState.STOPPING: "stopping", ServiceState.FAILED: "failed", ServiceState.UNKNOWN: "unknown"}
ICONS = {"start": "action-start", "stop": "action-stop", "restart": "action-restart"}
# A whitelist change: its button's text, object name (before "-{service}") and tooltip.
POLICY_BUTTONS = {
    "allow": ("Allow", "allow", ("Add it to this node's whitelist (the daemon's services.json): it may then be "
                                 "started, stopped and restarted from here")),
    "remove": ("Remove from whitelist", "unallow", ("Take it off the daemon's whitelist (this node's, and every "
                                                    "node's where it is listed there); it keeps running as it is")),
}


def _typed(text: str) -> str:
    return text.strip().lower().removesuffix(".service")


class ServiceConfirmDialog(QDialog):
    """Type the service's name to act on a protected one; the button opens only on an exact match."""

    def __init__(self, info: ServiceInfo, action: ServiceAction, node: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.info = info
        self.setWindowTitle(f"{action.capitalize()} {info.display_name or info.name}?")
        self.setMinimumWidth(420)
        layout = QVBoxLayout(self)
        containers = " (every container on it stops with it)" if _typed(info.name).startswith(("docker", "containerd")) \
            else ""
        layout.addWidget(label(f"{info.name} on {node} is protected: other things on the node depend on it"
                               f"{containers}. Type its name to {action} it.", wrap=True))
        self.name = line_edit(info.display_name or info.name, name="ConfirmName")
        layout.addWidget(self.name)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok.setText(action.capitalize())
        self.ok.setEnabled(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.name.textChanged.connect(self._check)

    def _check(self, text: str) -> None:
        names = {_typed(n) for n in (self.info.name, self.info.display_name, *self.info.aliases) if n}
        self.ok.setEnabled(_typed(text) in names)

    def typed(self) -> str:
        return self.name.text().strip()


def _policy_tip(s: ServicesState, info: ServiceInfo) -> str:
    """Why the page says what it says about ``info``."""
    if info.denied_by is not None:
        return (f"On the deny list compiled into every agent ({info.denied_by}): MirbadLLM never starts, "
                "stops or restarts it, and it cannot be whitelisted.")
    where = s.whitelisted_by(info)
    if "all" in where:
        return "Whitelisted for every node by the daemon's services.json."
    if "node" in where:
        return "Whitelisted for this node by the daemon's services.json."
    if info.whitelisted:
        return "Whitelisted by the agent's own services.json on the node (edit it there)."
    return "Not whitelisted: nothing may be done to it from here until it is allowed."


def _node_name(node: NodeView) -> str:
    return "this machine" if node.local else node.name


def _ask_confirm(parent: QWidget, info: ServiceInfo, action: ServiceAction, node: str) -> str | None:
    dialog = ServiceConfirmDialog(info, action, node, parent)  # from a click: not inside a task
    return dialog.typed() if dialog.exec() == QDialog.DialogCode.Accepted else None


class ServicesPage(ReadOnShow, QWidget):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = ServicesViewModel(ctx.fleet)
        self.ask_confirm: Callable[[QWidget, ServiceInfo, ServiceAction, str], str | None] = _ask_confirm
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        body, layout = page()
        outer.addWidget(body)
        layout.addWidget(page_header("Services", "The nodes' own services: start, stop and restart the ones "
                                     "their whitelist allows."))
        card = Card()
        bar = QHBoxLayout()
        bar.addWidget(QLabel("Node"))
        self.node_picker = combo_box("ServiceNode")
        self.node_picker.setMinimumWidth(220)
        self.node_picker.activated.connect(self._node_chosen)
        bar.addWidget(self.node_picker)
        self.show_all = QCheckBox("Show every service")
        self.show_all.setObjectName("ShowAllServices")
        self.show_all.setToolTip("Also the services nobody may manage from here, with the reason")
        self.show_all.clicked.connect(lambda on: ctx.act(self.vm.set_show_all(on)))
        bar.addWidget(self.show_all)
        bar.addStretch(1)
        self.refresh_button = button("Refresh", icon="action-restart", name="RefreshServices",
                                     on_click=lambda: ctx.act(self.vm.refresh()))
        bar.addWidget(self.refresh_button)
        card.body.addLayout(bar)
        self.note = label("", muted=True, wrap=True, name="ServicesNote")
        card.body.addWidget(self.note)
        self.table = read_only_table("ServiceTable", ["Service", "Description", "State", "May be managed", ""])
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        fit_columns(self.table, 1)
        card.body.addWidget(self.table, 1)
        layout.addWidget(card, 1)
        self._shown_nodes: tuple[tuple[str, str], ...] = ()
        bind(self, self.vm.state, self.show_state)
        self.show_state(self.vm.state.value)

    def _node_chosen(self, index: int) -> None:
        node_id = self.node_picker.itemData(index)
        if isinstance(node_id, str):
            self.ctx.act(self.vm.select_node(node_id))

    def show_state(self, s: ServicesState) -> None:
        nodes = tuple((n.id, _node_name(n) + ("" if n.state.value != "offline" else " (offline)")) for n in s.nodes)
        if nodes != self._shown_nodes:
            self._shown_nodes = nodes
            self.node_picker.clear()
            for node_id, name in nodes:
                self.node_picker.addItem(name, node_id)
        index = self.node_picker.findData(s.node_id)
        if index >= 0 and index != self.node_picker.currentIndex():
            self.node_picker.setCurrentIndex(index)
        self.show_all.setChecked(s.show_all)
        self.note.setText(s.note)
        set_prop(self.note, "error", bool(s.error or (s.listing and s.listing.error)))
        self._render(s)

    def _render(self, s: ServicesState) -> None:
        self.table.setRowCount(len(s.services))
        for row, info in enumerate(s.services):
            name = QTableWidgetItem(info.display_name or info.name)
            name.setToolTip(info.name + (f" (also {', '.join(info.aliases)})" if info.aliases else ""))
            self.table.setItem(row, 0, name)
            self.table.setItem(row, 1, QTableWidgetItem(info.description))
            state = QLabel(STATE_LABELS[info.state])
            set_prop(state, "badge", BADGES[info.state])
            state.setToolTip(info.detail + (f" · pid {info.pid}" if info.pid else ""))
            self.table.setCellWidget(row, 2, state)
            policy = QTableWidgetItem(verdict(info))
            policy.setToolTip(_policy_tip(s, info))
            self.table.setItem(row, 3, policy)
            self.table.setCellWidget(row, 4, self._buttons(info, info.name in s.busy, s.policy_actions(info)))

    def _buttons(self, info: ServiceInfo, busy: bool, policy_actions: tuple[str, ...] = ()) -> QWidget:
        cell = QWidget()
        row = QHBoxLayout(cell)
        row.setContentsMargins(0, 0, 0, 0)
        for action in actions_for(info):
            btn = button(action.capitalize(), icon=ICONS[action], kind="danger" if action == "stop" else None)
            btn.setObjectName(f"{action}-{info.name}")
            btn.setEnabled(not busy)
            btn.clicked.connect(lambda _=False, i=info, a=action: self.run(i, a))
            row.addWidget(btn)
        for key, change in (("allow", self.vm.allow), ("remove", self.vm.remove)):
            if key in policy_actions:
                text, name, tip = POLICY_BUTTONS[key]
                btn = button(text)
                btn.setObjectName(f"{name}-{info.name}")
                btn.setToolTip(tip)
                btn.clicked.connect(lambda _=False, c=change, i=info: self.ctx.act(self._said(c(i.name))))
                row.addWidget(btn)
        row.addStretch(1)
        return cell

    async def _said(self, edit: Awaitable[str]) -> None:
        """A whitelist edit, its own sentence in the status bar when it is done."""
        self.ctx.messages.emit(Message(await edit))

    def run(self, info: ServiceInfo, action: ServiceAction) -> None:
        confirm = None
        if info.protected:
            node = self.vm.state.value.node
            confirm = self.ask_confirm(self, info, action, _node_name(node) if node else "this node")
            if not confirm:
                return
        self.ctx.act(self.vm.act(info.name, action, confirm),
                     f"{action.capitalize()} {info.display_name or info.name}: done")
