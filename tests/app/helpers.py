"""Helpers of the app's tests: wait *until* something holds (never for a fixed time), and open a
model's Settings tab in the main window."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

_LOGGER = logging.getLogger(__name__)


async def until(predicate: Callable[[], object], timeout: float = 3.0, what: str = "condition") -> None:
    """Like ``qtbot.waitUntil`` for plain asyncio: yield to the loop until ``predicate()`` is truthy."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


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
