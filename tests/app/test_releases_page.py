"""The Releases page against the in-memory daemon: the versions, the daemon restarted onto the
installed one ("Now running"), then the agent release rolled out node by node, and a refusal shown
with nothing changed. The real restart is ``tests/updates/test_update_restart.py``."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient
from helpers import cells

from app.daemon_restart import RestartOutcome
from app.ui.main_window import PAGES, MainWindow
from app.ui.pages.releases import ReleasesPage
from app.ui.tray import TrayController
from daemon.api.nodes import NodeState, NodeView
from daemon.api.upgrades import RolloutState

OLD, NEW = "0.1.0", "0.2.0"


class FakeRestarter:
    """The daemon "restarted" onto NEW: the in-memory daemon reports it from then on."""

    installed_version = NEW

    def __init__(self, daemon: FakeDaemonClient) -> None:
        self.daemon = daemon
        self.restarts = 0

    async def restart(self, client: Any) -> RestartOutcome:
        self.restarts += 1
        self.daemon.daemon_version = NEW
        return RestartOutcome(NEW, NEW, NEW, "http://127.0.0.1:8484", 1.5)


@pytest.fixture
def fake() -> FakeDaemonClient:
    daemon = FakeDaemonClient()
    daemon.rollout_step_s = 0
    for n, name in enumerate(("alpha", "beta")):
        daemon.nodes.append(NodeView(id=f"{n + 1}" * 64, name=name, version=OLD, state=NodeState.ONLINE))
    return daemon


def test_releases_is_a_page_with_its_icon() -> None:
    assert ("releases", "Releases") in PAGES
    assert (Path(__file__).resolve().parents[2] / "resources" / "icons" / "nav-releases.svg").exists()


def test_an_older_daemon_is_restarted_onto_the_installed_version_then_the_nodes_follow_one_by_one(
        window: MainWindow, fake: FakeDaemonClient, qtbot: Any) -> None:
    restarter = FakeRestarter(fake)
    window.ctx.releases.set_restarter(restarter)  # type: ignore[arg-type]
    updates = window.ctx.settings.updates
    updates.state.set(replace(updates.state.value, latest=NEW))  # the feed's last check said NEW
    window.show_page("releases")
    page: ReleasesPage = window.releases
    qtbot.waitUntil(lambda: page.running.text().startswith(OLD))
    assert page.installed.text() == NEW and page.latest.text() == NEW
    assert "older than this app" in page.running.text() and page.restart_button.isVisible()
    assert cells(page.table) == [["workstation (this machine)", "—", "Runs with the daemon"],
                                 ["alpha", OLD, "Up to date"], ["beta", OLD, "Up to date"]]

    tray = TrayController(window.ctx, open_window=lambda: None, quit_app=lambda: None,
                          stop_all_and_quit=lambda: None)
    line = asyncio.ensure_future(window.ctx.releases.catch_up())  # what the app runs once at start
    qtbot.waitUntil(line.done)
    assert restarter.restarts == 1
    assert [(n.title, n.message) for n in tray.notified] == [(f"MirbadLLM {NEW} is running", line.result())]
    tray.close()
    assert page.running.text() == NEW
    assert page.outcome.text() == f"Now running {NEW}. 2 node(s) run an older agent: Roll out to nodes."
    assert [row[2] for row in cells(page.table) if row[0] in ("alpha", "beta")] == ["Older than the daemon"] * 2
    assert page.roll_out_button.isEnabled()

    page.roll_out_button.click()
    qtbot.waitUntil(lambda: window.ctx.releases.state.value.rollout.state == RolloutState.DONE)
    qtbot.waitUntil(lambda: [row[1:] for row in cells(page.table) if row[0] in ("alpha", "beta")]
                    == [[NEW, "Done"], [NEW, "Done"]])
    steps = [(e.data["name"], e.data["state"]) for e in fake._events if e.type == "upgrade.node"]
    assert steps == [("alpha", "upgrading"), ("alpha", "done"), ("beta", "upgrading"), ("beta", "done")]
    assert page.rollout_note.text() == f"{NEW} rolled out to 2 node(s)."

    again = asyncio.ensure_future(window.ctx.releases.catch_up())  # up to date now: nothing restarts
    qtbot.waitUntil(again.done)
    assert again.result() is None and restarter.restarts == 1


def test_a_refused_release_is_shown_and_no_node_changes(window: MainWindow, fake: FakeDaemonClient,
                                                        qtbot: Any) -> None:
    fake.release_refusal = ("Version check failed: the release 0.0.9 is older than this daemon, which runs 0.1.0 "
                            "(a downgrade or a replayed old feed); no node was told.")
    window.show_page("releases")
    page: ReleasesPage = window.releases
    qtbot.waitUntil(lambda: len(cells(page.table)) == 3)
    assert not page.restart_button.isVisible()  # no restarter: the daemon is not this app's to restart
    page.roll_out_button.click()
    qtbot.waitUntil(lambda: page.rollout_note.text().startswith("Version check failed"))
    assert page.rollout_note.property("role") == "error" and page.outcome.text() == ""
    assert window.ctx.releases.state.value.rollout.state == RolloutState.IDLE
    assert {n.version for n in fake.nodes if not n.local} == {OLD} and page.roll_out_button.isEnabled()
