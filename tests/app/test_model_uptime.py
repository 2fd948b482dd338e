"""A ready model's uptime in its panel counts on between snapshots (it once stood at "2 s", the
figure computed when the ready event arrived, for as long as nothing else changed)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition

from app.ui.main_window import MainWindow
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.models_page import ModelsPageViewModel
from daemon.api.models import ModelState, ModelStatus, ModelView

STARTED = 1_000_000.0


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ready(started_at: float | None, state: ModelState = ModelState.READY) -> ModelView:
    return ModelView(definition=definition("alpha"),
                     status=ModelStatus(id="alpha", served_name="alpha", state=state, started_at=started_at))


def test_uptime_is_read_from_the_clock_each_time_it_is_asked(fake: FakeDaemonClient) -> None:
    clock = FakeClock(STARTED + 2)
    models = ModelsPageViewModel(FleetViewModel(fake), clock=clock)
    view = ready(STARTED)
    assert models.uptime(view) == "2 s"
    clock.now = STARTED + 62
    assert models.uptime(view) == "1 min 2 s"  # the same snapshot, a minute later
    clock.now = STARTED + 2 * 3600 + 5 * 60
    assert models.uptime(view) == "2 h 5 min"
    assert models.uptime(ready(STARTED, ModelState.STARTING)) == "—"
    assert models.uptime(ready(None)) == "—"
    assert models.uptime(None) == "—"
    clock.now = STARTED - 30  # a node whose clock runs behind: never a negative uptime
    assert models.uptime(view) == "0 s"


@pytest.mark.gui
def test_the_panel_uptime_keeps_counting_while_nothing_else_changes(window: MainWindow, fake: FakeDaemonClient,
                                                                    qtbot: Any) -> None:
    clock = FakeClock(STARTED + 2)
    window.ctx.models.clock = clock
    fake.set_state("alpha", ModelState.READY, started_at=STARTED)
    window.open_model("alpha")
    uptime = window.models.panel.overview.values["uptime"]
    qtbot.waitUntil(lambda: uptime.text() == "2 s")
    clock.now = STARTED + 60  # a minute later, no event, no new snapshot
    qtbot.waitUntil(lambda: uptime.text() == "1 min 0 s", timeout=5000)
    fake.set_state("alpha", ModelState.STOPPED, started_at=None)
    qtbot.waitUntil(lambda: uptime.text() == "—")
    assert not window.models.panel.overview.ticker.isActive()
