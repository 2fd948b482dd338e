"""A model pulled from the hub with a newer revision shows an update badge on the Models page; its menu
updates the model (the badge then offers the roll back) and rolls it back; a refused hub answer shows
as such, with its reason; a model not from the hub has no badge."""

from __future__ import annotations

from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from PySide6.QtCore import Qt

from app.ui.main_window import MainWindow
from daemon.api.models import ModelSource, ModelState

REPO = "acme/gamma-GGUF"
OLD = "a" * 40


@pytest.fixture
def fake() -> FakeDaemonClient:
    pulled = ModelSource(hf_repo=REPO, hf_file="gamma-Q4_K_M.gguf", revision=OLD)
    client = FakeDaemonClient([definition("alpha"), definition("gamma", sources=pulled)])
    client.publish_revision(REPO)
    return client


def row(window: MainWindow, model_id: str) -> Any:
    page = window.models
    return next(page.list.itemWidget(page.list.item(i)) for i in range(page.list.count())
                if page.list.item(i).data(Qt.ItemDataRole.UserRole) == model_id)


def badge(window: MainWindow, model_id: str) -> Any:
    return row(window, model_id).update_badge


@pytest.mark.gui
def test_the_badge_offers_the_update_then_the_roll_back(window: MainWindow, fake: FakeDaemonClient,
                                                        qtbot: Any) -> None:
    fake.set_state("gamma", ModelState.READY)
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None)
    shown = badge(window, "gamma")
    new = fake.hub_latest[REPO]
    assert shown.text() == "Update available" and new[:12] in shown.toolTip() and OLD[:12] in shown.toolTip()
    assert [a.text() for a in shown.menu().actions()] == [f"Update to revision {new[:12]}"]
    assert badge(window, "alpha") is None  # not from the hub: nothing to offer

    shown.menu().actions()[0].trigger()
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None and badge(window, "gamma").text() == "Roll back…")
    assert fake.called("update_model_files") == [("gamma",)]
    gamma = fake.definitions["gamma"]
    assert gamma.sources is not None and gamma.sources.revision == new and new[:12] in gamma.model_path
    assert fake.statuses["gamma"].state in (ModelState.STARTING, ModelState.READY)  # restarted on the new file
    (back,) = badge(window, "gamma").menu().actions()
    assert back.text() == f"Roll back to revision {OLD[:12]}"

    back.trigger()
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None and badge(window, "gamma").text() == "Update available")
    assert fake.called("rollback_model") == [("gamma",)]
    assert fake.definitions["gamma"].sources.revision == OLD  # type: ignore[union-attr]


@pytest.mark.gui
def test_a_refused_hub_answer_shows_why_and_offers_no_update(window: MainWindow, fake: FakeDaemonClient,
                                                             qtbot: Any) -> None:
    why = "the hub changed gamma-Q4_K_M.gguf sha256 without a new revision: refusing its answer"
    fake.hub_refused["gamma"] = why
    fake.publish("model.update_available", "gamma")  # the daemon's daily check found it
    qtbot.waitUntil(lambda: badge(window, "gamma") is not None and badge(window, "gamma").text() == "Update refused")
    assert why in badge(window, "gamma").toolTip()
    assert badge(window, "gamma").menu() is None
