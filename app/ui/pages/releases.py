"""Releases: the version this app installed, the one the daemon runs, the feed's latest, every node's
agent version, and the agent release rolled out to the nodes one at a time with per-node progress."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QHBoxLayout,
    QScrollArea,
    QTableWidgetItem,
)

from app.context import AppContext
from app.ui.widgets import (
    Card,
    ReadOnShow,
    bind,
    button,
    fit_columns,
    label,
    page,
    page_header,
    read_only_table,
    set_prop,
)
from app.viewmodels.releases import ReleasesState, node_cells
from daemon.api.upgrades import RolloutState

ROLLOUT_NOTE = ("The daemon sends the agent release it has staged to one node at a time, waits until that node "
                "is back on the new version with its models adopted, and stops at the first node that fails. "
                "A release older than what runs, or not signed by a MirbadLLM release key, is refused.")


def rollout_line(s: ReleasesState) -> str:
    if s.refusal:
        return s.refusal
    r = s.rollout
    if r.state == RolloutState.RUNNING:
        done = sum(1 for n in r.nodes if n.state.value == "done")
        return f"Rolling {r.version} out: {done} of {len(r.nodes)} node(s) done."
    if r.state == RolloutState.DONE:
        return f"{r.version} rolled out to {len(r.nodes)} node(s)."
    if r.state == RolloutState.FAILED:
        return f"The rollout of {r.version} stopped: {r.reason}"
    behind = s.nodes_behind
    return f"{len(behind)} node(s) run an older agent than the daemon." if behind else ""


class ReleasesPage(ReadOnShow, QScrollArea):
    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.vm = ctx.releases
        self.setWidgetResizable(True)
        body, layout = page()
        self.setWidget(body)
        layout.addWidget(page_header("Releases", "Which version runs where, and the nodes brought onto it."))
        layout.addWidget(self._versions_card())
        layout.addWidget(self._nodes_card(), 1)
        bind(self, self.vm.state, self.show_state)
        self.show_state(self.vm.state.value)

    def _versions_card(self) -> Card:
        card = Card("Versions")
        form = QFormLayout()
        self.installed = label("", selectable=True, name="ReleasesInstalled")
        self.running = label("", selectable=True, name="ReleasesRunning")
        self.latest = label("", selectable=True, name="ReleasesLatest")
        form.addRow("This app", self.installed)
        form.addRow("The daemon", self.running)
        form.addRow("Latest release", self.latest)
        card.body.addLayout(form)
        row = QHBoxLayout()
        row.addStretch(1)
        self.restart_button = button("Restart the daemon onto this version", name="ReleasesRestartDaemon",
                                     on_click=lambda: self.ctx.act(self.vm.restart_daemon()))
        row.addWidget(self.restart_button)
        card.body.addLayout(row)
        self.outcome = label("", wrap=True, selectable=True, name="ReleasesOutcome")
        card.body.addWidget(self.outcome)
        return card

    def _nodes_card(self) -> Card:
        card = Card("Nodes")
        card.body.addWidget(label(ROLLOUT_NOTE, muted=True, wrap=True))
        self.table = read_only_table("ReleasesNodes", ["Node", "Agent version", "Rollout"])
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        fit_columns(self.table, 2)
        self.table.setMinimumHeight(160)
        card.body.addWidget(self.table)
        row = QHBoxLayout()
        self.rollout_note = label("", wrap=True, name="ReleasesRollout")
        row.addWidget(self.rollout_note, 1)
        self.roll_out_button = button("Roll out to nodes", kind="primary", name="ReleasesRollOut",
                                      on_click=lambda: self.ctx.act(self.vm.roll_out()))
        row.addWidget(self.roll_out_button)
        card.body.addLayout(row)
        return card

    def show_state(self, s: ReleasesState) -> None:
        self.installed.setText(s.installed)
        running = s.running or "…"
        if s.daemon_behind:
            running += "  (older than this app: restart it to run the new version)"
        self.running.setText(running)
        self.latest.setText(s.latest or "Not checked yet: Settings → Updates → Check for updates")
        self.restart_button.setVisible(s.can_restart)
        self.restart_button.setEnabled(not s.restarting)
        text = f"Restarting the daemon onto {s.installed}…" if s.restarting else s.line
        self.outcome.setText(text)
        self.outcome.setVisible(bool(text))
        set_prop(self.outcome, "role", "error" if s.error and not s.restarting else "")
        self.table.setRowCount(len(s.nodes))
        for row, node in enumerate(s.nodes):
            for col, text in enumerate(node_cells(node, s.running, s.rollout)):
                self.table.setItem(row, col, QTableWidgetItem(text))
        self.rollout_note.setText(rollout_line(s))
        set_prop(self.rollout_note, "role", "error" if s.refusal else "")
        self.roll_out_button.setEnabled(s.can_roll_out)
