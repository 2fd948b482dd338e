"""A ready model's uptime in its panel counts on between snapshots (it once stood at "2 s", the
figure computed when the ready event arrived, for as long as nothing else changed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import definition
from real_daemon import RealDaemon, daemon_in_thread

from app.ui.main_window import MainWindow
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.models_page import ModelsPageViewModel
from daemon.api.client import DaemonClient
from daemon.api.models import ModelState, ModelStatus, ModelView
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes

STARTED = 1_000_000.0


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ready(started_at: float | None, state: ModelState = ModelState.READY) -> ModelView:
    return ModelView(definition=definition("alpha"),
                     status=ModelStatus(id="alpha", served_name="alpha", state=state, started_at=started_at))


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """A real daemon with its local agent, a fake llama-server and alpha (a tiny GGUF), stopped."""
    root = tmp_path_factory.mktemp("uptime")
    (root / "models").mkdir()
    (root / "models" / "alpha.gguf").write_bytes(gguf_bytes())
    with daemon_in_thread(root / "home", write_fake_runtime(root / "runtime")) as found:
        found.call(lambda deps: deps.registry.add(definition("alpha", model_path=str(root / "models" / "alpha.gguf"))))
        yield found


def test_uptime_is_read_from_the_clock_each_time_it_is_asked() -> None:
    clock = FakeClock(STARTED + 2)
    models = ModelsPageViewModel(FleetViewModel(DaemonClient("http://127.0.0.1:9", "unused")), clock=clock)
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
def test_the_panel_uptime_keeps_counting_while_nothing_else_changes(
        running: RealDaemon, open_main_window: Callable[..., MainWindow], qtbot: Any, tmp_path: Path) -> None:
    client = DaemonClient(*running, client_name="app")
    window = open_main_window(client)
    started = asyncio.ensure_future(client.start_model("alpha", wait=True))
    qtbot.waitUntil(started.done, timeout=60_000)
    began = started.result().started_at
    assert began is not None
    clock = FakeClock(began + 2)
    window.ctx.models.clock = clock
    window.open_model("alpha")
    uptime = window.models.panel.overview.values["uptime"]
    qtbot.waitUntil(lambda: uptime.text() == "2 s", timeout=10_000)
    clock.now = began + 60  # a minute later, no event, no new snapshot
    qtbot.waitUntil(lambda: uptime.text() == "1 min 0 s", timeout=5000)
    stopped = asyncio.ensure_future(client.stop_model("alpha"))
    qtbot.waitUntil(stopped.done, timeout=30_000)
    qtbot.waitUntil(lambda: uptime.text() == "—", timeout=10_000)
    assert not window.models.panel.overview.ticker.isActive()
