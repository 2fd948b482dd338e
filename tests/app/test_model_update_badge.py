"""Over the real daemon (its local agent, the fake llama-server) and the fake hub: a model pulled from the
hub with a newer revision shows an update badge on the Models page; its menu updates the model (the
badge then offers the roll back) and rolls it back; a refused hub answer (a file rewritten without a new
revision) shows as such, with its reason; a model not from the hub has no badge."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import definition
from PySide6.QtCore import Qt
from real_daemon import RealDaemon, ask, daemon_on_a_machine, hub_in_thread, models_only

from agent.api.sources import HfFileRef
from app.ui.main_window import MainWindow
from daemon.api.client import DaemonClient
from daemon.api.models import ModelDefinition, ModelState
from daemon.api.sources import DownloadQuery
from tests.fakes.fake_hf_hub import FakeHub
from tests.fakes.gguf_files import gguf_bytes

REPO, FILE = "acme/gamma-GGUF", "gamma-Q4_K_M.gguf"


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, FakeHub]]:
    """The daemon with its local agent (the fake llama-server) and the hub holding gamma's repository."""
    root = tmp_path_factory.mktemp("updates")
    with hub_in_thread(root) as hub:
        hub.add(REPO, FILE, gguf_bytes() + bytes(1000))
        with daemon_on_a_machine(root) as found:
            yield found, hub


@pytest.fixture
def pulled(machine: tuple[RealDaemon, FakeHub], qtbot: Any) -> str:
    """alpha (not from the hub) and gamma, pulled from the hub (stopped); the revision gamma was pulled at."""
    daemon, hub = machine
    models_only(daemon, definition("alpha", node="local"))
    started = ask(daemon, lambda c: c.download(DownloadQuery(hf=HfFileRef(repo=REPO, quant="Q4_K_M"), model_id="gamma")))
    qtbot.waitUntil(lambda: ask(daemon, lambda c: c.transfer(started.id)).registered == ["gamma"], timeout=30_000)
    return hub.commit_of(REPO)


@pytest.fixture
def window(machine: tuple[RealDaemon, FakeHub], pulled: str, open_main_window: Callable[..., MainWindow]) -> MainWindow:
    return open_main_window(DaemonClient(*machine[0], client_name="app"))


def gamma(daemon: RealDaemon) -> ModelDefinition:
    return ask(daemon, lambda c: c.get_model("gamma")).definition


def row(window: MainWindow, model_id: str) -> Any:
    page = window.models
    return next(page.list.itemWidget(page.list.item(i)) for i in range(page.list.count())
                if page.list.item(i).data(Qt.ItemDataRole.UserRole) == model_id)


def badge(window: MainWindow, model_id: str) -> Any:
    return row(window, model_id).update_badge


@pytest.mark.gui
def test_the_badge_offers_the_update_then_the_roll_back(window: MainWindow, machine: tuple[RealDaemon, FakeHub],
                                                        pulled: str, qtbot: Any) -> None:
    daemon, hub = machine
    old = pulled
    assert ask(daemon, lambda c: c.start_model("gamma", wait=True)).state == ModelState.READY
    old_path = gamma(daemon).model_path
    new = hub.publish(REPO, {FILE: gguf_bytes() + bytes(2000)})
    ask(daemon, lambda c: c.model_updates(check=True))  # the daemon's check finds it, and says so as an event
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None, timeout=30_000)
    shown = badge(window, "gamma")
    assert shown.text() == "Update available" and new[:12] in shown.toolTip() and old[:12] in shown.toolTip()
    assert [a.text() for a in shown.menu().actions()] == [f"Update to revision {new[:12]}"]
    assert badge(window, "alpha") is None  # not from the hub: nothing to offer

    shown.menu().actions()[0].trigger()
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None and badge(window, "gamma").text() == "Roll back…",
                    timeout=30_000)
    updated = gamma(daemon)
    assert updated.sources is not None and updated.sources.revision == new
    assert updated.model_path != old_path and Path(updated.model_path).read_bytes() == hub.repos[REPO][FILE].data
    qtbot.waitUntil(lambda: ask(daemon, lambda c: c.get_model("gamma")).status.state == ModelState.READY,
                    timeout=30_000)  # restarted on the new file
    (back,) = badge(window, "gamma").menu().actions()
    assert back.text() == f"Roll back to revision {old[:12]}"

    back.trigger()
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None and badge(window, "gamma").text() == "Update available",
                    timeout=30_000)
    rolled = gamma(daemon)
    assert rolled.sources is not None and rolled.sources.revision == old and rolled.model_path == old_path


@pytest.mark.gui
def test_a_refused_hub_answer_shows_why_and_offers_no_update(window: MainWindow, machine: tuple[RealDaemon, FakeHub],
                                                             qtbot: Any) -> None:
    daemon, hub = machine
    qtbot.waitUntil(lambda: window.models.list.count() == 2 and "gamma" in window.ctx.models.updates.state.value,
                    timeout=30_000)  # the app has read the daemon's answers
    assert badge(window, "gamma") is None  # pulled at the hub's newest revision: nothing to offer yet
    hub.add(REPO, FILE, gguf_bytes() + bytes(3000))  # new bytes under the same revision: the hub rewrote it in place
    # the daemon's check (daily, here asked) refuses that answer, and says so to the app that is open
    [found] = ask(daemon, lambda c: c.model_updates(check=True))
    assert found.state == "refused"
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None and badge(window, "gamma").text() == "Update refused",
                    timeout=30_000)
    assert f"the hub changed {FILE}" in badge(window, "gamma").toolTip()
    assert "without a new revision" in badge(window, "gamma").toolTip()
    assert badge(window, "gamma").menu() is None
