"""The Releases page over the real daemon and two real agents ("alpha", "beta") that run an older
agent: the versions, the daemon brought onto the installed one ("Now running"), the agent release
rolled out node by node (a node that refuses stops the rest), and a refused release shown with
nothing changed.

What cannot happen in this process is kept as the page over a hand-built state: the daemon reports
the version it was started with (``daemon.listener.VERSION``), so its restart onto a newer one is a
stand-in restarter here (the real restart: ``tests/updates/test_update_restart.py``); agents in this
process cannot be upgraded (not run by ``mirbadllm agent``: they refuse), so a rollout that ends
"Done" is shown from a hand-built rollout (the real one, with agent processes:
``tests/fleet/test_rollout.py``)."""

from __future__ import annotations

import asyncio
import base64
import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers import cells
from packaging.version import Version

from agent.api.upgrade import agent_platform
from app.daemon_restart import RestartOutcome
from app.ui.main_window import PAGES, MainWindow
from app.ui.pages.releases import ReleasesPage
from app.ui.tray import TrayController
from core.releases.feed import feed_bytes, make_feed
from core.releases.signing import public_key_b64
from daemon.api.client import DaemonClient
from daemon.api.program import program_version
from daemon.api.upgrades import (
    NodeUpgradeState,
    NodeUpgradeView,
    RolloutState,
    RolloutView,
)

RUNNING = program_version()  # the real daemon's version: this process's
OLD = "0.0.1"  # the agents'
NEW = f"{Version(RUNNING).major}.{Version(RUNNING).minor + 1}.0"  # the installed app's, after an update


class StandInRestarter:
    """``app.daemon_restart.DaemonRestarter``'s place: the daemon "restarted" onto NEW (see the docstring)."""

    installed_version = NEW

    def __init__(self, url: str) -> None:
        self.url = url
        self.restarts = 0

    async def restart(self, client: Any) -> RestartOutcome:
        self.restarts += 1
        return RestartOutcome(NEW, NEW, NEW, self.url, 1.5)


@pytest.fixture(scope="module")
def nodes(real_daemon: Any) -> dict[str, str]:
    """name -> node id: alpha and beta, real agents reporting OLD."""
    return {name: real_daemon.add_node(name, version=OLD) for name in ("alpha", "beta")}


@pytest.fixture
def window(real_daemon: Any, nodes: dict[str, str], open_main_window: Any) -> MainWindow:
    return open_main_window(DaemonClient(*real_daemon, client_name="app"), nodes_loaded=True)


def stage_release(real_daemon: Any, version: str) -> None:
    """A signed release of ``version`` with this machine's agent build, staged where the daemon looks,
    signed by a key the daemon trusts (tests hand in their own: ``UpgradeManager.trusted_keys``)."""
    upgrades = real_daemon.deps.upgrades
    folder = upgrades.default_folder
    folder.mkdir(parents=True, exist_ok=True)
    build = folder / f"mirbadllm-agent-{version}"
    build.write_text(f"{version}\n")
    here = agent_platform(platform.system(), platform.machine())
    assert here is not None
    data = feed_bytes(make_feed(version, {here: build}))
    key = Ed25519PrivateKey.generate()
    (folder / "feed.json").write_bytes(data)
    (folder / "feed.json.sig").write_bytes(base64.b64encode(key.sign(data)) + b"\n")
    upgrades.trusted_keys = (public_key_b64(key),)


def _versions(real_daemon: Any) -> dict[str, str | None]:
    return {n.name: n.version for n in real_daemon.call(lambda deps: deps.nodes.views())}


def test_releases_is_a_page_with_its_icon() -> None:
    assert ("releases", "Releases") in PAGES
    assert (Path(__file__).resolve().parents[2] / "resources" / "icons" / "nav-releases.svg").exists()


def test_an_older_daemon_is_restarted_onto_the_installed_version_and_the_nodes_are_told_one_by_one(
        window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    restarter = StandInRestarter(real_daemon[0])
    window.ctx.releases.set_restarter(restarter)  # type: ignore[arg-type]
    updates = window.ctx.settings.updates
    # The feed's last check said NEW; its release is staged on the daemon by hand (no feed to fetch it from).
    updates.state.set(replace(updates.state.value, latest=NEW, feed_url=""))
    window.show_page("releases")
    page: ReleasesPage = window.releases
    qtbot.waitUntil(lambda: page.running.text().startswith(RUNNING) and len(cells(page.table)) == 2)
    assert page.installed.text() == NEW and page.latest.text() == NEW
    assert "older than this app" in page.running.text() and page.restart_button.isVisible()
    assert cells(page.table) == [["alpha", OLD, "Older than the daemon"], ["beta", OLD, "Older than the daemon"]]

    tray = TrayController(window.ctx, open_window=lambda: None, quit_app=lambda: None,
                          stop_all_and_quit=lambda: None)
    line = asyncio.ensure_future(window.ctx.releases.catch_up())  # what the app runs once at start
    qtbot.waitUntil(line.done)
    assert restarter.restarts == 1
    assert [(n.title, n.message) for n in tray.notified] == [(f"MirbadLLM {NEW} is running", line.result())]
    tray.close()
    assert page.running.text() == NEW
    assert page.outcome.text() == f"Now running {NEW}. 2 node(s) run an older agent: Roll out to nodes."
    assert page.roll_out_button.isEnabled()

    stage_release(real_daemon, NEW)
    page.roll_out_button.click()  # the real daemon's rollout: alpha first, which refuses; beta is never told
    qtbot.waitUntil(lambda: window.ctx.releases.state.value.rollout.state == RolloutState.FAILED, timeout=30_000)
    qtbot.waitUntil(lambda: [row[2].split(":")[0] for row in cells(page.table)] == ["Failed", "Pending"])
    assert "upgrade it by hand" in cells(page.table)[0][2]  # the agent's own reason
    assert page.rollout_note.text().startswith(f"The rollout of {NEW} stopped: ")
    assert _versions(real_daemon) == {"alpha": OLD, "beta": OLD}

    current = StandInRestarter(real_daemon[0])  # an app at the daemon's own version: up to date, nothing restarts
    current.installed_version = RUNNING
    window.ctx.releases.set_restarter(current)  # type: ignore[arg-type]
    again = asyncio.ensure_future(window.ctx.releases.catch_up())
    qtbot.waitUntil(again.done)
    assert again.result() is None and current.restarts == 0 and restarter.restarts == 1


def test_a_finished_rollout_says_each_node_is_done(window: MainWindow, nodes: dict[str, str], qtbot: Any) -> None:
    releases = window.ctx.releases
    window.show_page("releases")
    page: ReleasesPage = window.releases
    qtbot.waitUntil(lambda: len(cells(page.table)) == 2)
    done = RolloutView(state=RolloutState.DONE, version=NEW, nodes=[
        NodeUpgradeView(node=nodes[name], name=name, from_version=OLD, state=NodeUpgradeState.DONE)
        for name in ("alpha", "beta")])
    releases.state.set(replace(releases.state.value, rollout=done))  # hand-built: see the docstring
    assert [row[2] for row in cells(page.table)] == ["Done", "Done"]
    assert page.rollout_note.text() == f"{NEW} rolled out to 2 node(s)."


def test_a_refused_release_is_shown_and_no_node_changes(window: MainWindow, real_daemon: Any, qtbot: Any) -> None:
    stage_release(real_daemon, "0.0.0")  # older than this daemon and its nodes: a downgrade or a replayed feed
    updates = window.ctx.settings.updates
    updates.state.set(replace(updates.state.value, feed_url=""))  # the staged one, not a feed's
    window.show_page("releases")
    page: ReleasesPage = window.releases
    qtbot.waitUntil(lambda: len(cells(page.table)) == 2)
    assert not page.restart_button.isVisible()  # no restarter: the daemon is not this app's to restart
    qtbot.waitUntil(page.roll_out_button.isEnabled)
    page.roll_out_button.click()
    qtbot.waitUntil(lambda: page.rollout_note.text().startswith("Version check failed"))
    assert f"the release 0.0.0 is older than this daemon, which runs {RUNNING}" in page.rollout_note.text()
    assert "no node was told" in page.rollout_note.text()
    assert page.rollout_note.property("role") == "error" and page.outcome.text() == ""
    assert window.ctx.releases.state.value.rollout.state != RolloutState.RUNNING
    assert _versions(real_daemon) == {"alpha": OLD, "beta": OLD} and page.roll_out_button.isEnabled()
