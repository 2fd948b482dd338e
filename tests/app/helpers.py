"""Helpers of the app's tests: wait *until* something holds (never for a fixed time), a fleet
view-model started and stopped over a fake daemon, the Add model view-model over one, a playground pointed at a test upstream, the Add model wizard opened over the main window, a table's texts, and a model's Settings tab in the main window."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any

from app.viewmodels.add_model import AddModelViewModel
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.playground import PlaygroundViewModel
from daemon.api.models import ModelDefinition

_LOGGER = logging.getLogger(__name__)


def definition(model_id: str, **kw: Any) -> ModelDefinition:
    """A model's definition as the tests write one: served as its id, its file ``/models/<id>.gguf``."""
    return ModelDefinition(id=model_id, served_name=kw.pop("served_name", model_id),
                           model_path=kw.pop("model_path", f"/models/{model_id}.gguf"), **kw)


async def until(predicate: Callable[[], object], timeout: float = 3.0, what: str = "condition") -> None:
    """Like ``qtbot.waitUntil`` for plain asyncio: yield to the loop until ``predicate()`` is truthy."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


async def started(client: Any) -> FleetViewModel:
    """A ``FleetViewModel`` over ``client`` (a fake daemon), once its first resync is in."""
    fleet = FleetViewModel(client, host_refresh_s=3600, poll_timeout=5)
    fleet.start()
    await until(lambda: fleet.snapshot.value.loaded, what="first resync")
    return fleet


async def stopped(fleet: FleetViewModel, client: Any) -> None:
    """Stop ``fleet`` once its feed has taken ``client``'s last event.

    A cancel that lands as an event arrives can be swallowed by Python 3.11's wait_for in the fake,
    and the feed would poll on."""
    await until(lambda: fleet.feed.since == client._last_id, what="the feed to catch up")
    await fleet.stop()


@asynccontextmanager
async def add_model_vm(client: Any) -> AsyncIterator[AddModelViewModel]:
    """An ``AddModelViewModel`` over ``client`` (a fake daemon) and a started fleet's events; at the end
    it is closed and the fleet stopped once its feed has taken the last events (a feed cancelled
    just as its wait_for completes can lose the cancel on Python 3.11, and stop() would wait forever)."""
    fleet = FleetViewModel(client, host_refresh_s=3600, poll_timeout=1)
    fleet.start()
    await until(lambda: fleet.snapshot.value.loaded)
    vm = AddModelViewModel(client, fleet.events)
    try:
        yield vm
    finally:
        vm.close()
        await until(lambda: fleet.feed.since >= client._last_id)
        await fleet.stop()


async def playground_at(client: Any, api_url: str) -> PlaygroundViewModel:
    """A ``PlaygroundViewModel`` over a fleet resynced once from ``client``, whose daemon's API URL
    is ``api_url`` (a test upstream that answers the chat)."""
    fleet = FleetViewModel(client, host_refresh_s=3600)
    await fleet.resync()
    snap = fleet.snapshot.value
    assert snap.daemon is not None
    fleet.snapshot.set(replace(snap, daemon=snap.daemon.model_copy(update={"api_url": api_url})))
    return PlaygroundViewModel(fleet)


def cells(table: Any) -> list[list[str]]:
    """A ``QTableWidget``'s texts, row by row ("" for an empty cell)."""
    return [[table.item(r, c).text() if table.item(r, c) else "" for c in range(table.columnCount())]
            for r in range(table.rowCount())]


def settings_of(window: Any, qtbot: Any, model_id: str) -> Any:
    """The Models page's Settings editor of ``model_id`` in ``window`` (a ``MainWindow``), once its form is up."""
    from app.ui.pages.model_panel import (
        SETTINGS,  # Qt widgets: only the widget tests import them
    )

    window.show_page("models")
    window.models.select(model_id)
    panel = window.models.panel
    panel.tabs.setCurrentIndex(SETTINGS)
    qtbot.waitUntil(lambda: panel.settings.form is not None and panel.settings.form.original.id == model_id)
    return panel.settings


@contextmanager
def add_model_dialog(ctx: Any, window: Any) -> Iterator[Any]:
    """The Add model wizard over ``window`` (a ``MainWindow`` on ``ctx``), shown; closed at the end,
    pass or fail. (Qt widgets are imported here: only the widget tests ask for them.)"""
    from app.ui.add_model_dialog import AddModelDialog

    dialog = AddModelDialog(ctx, window)
    dialog.show()
    try:
        yield dialog
    finally:
        dialog.reject()
