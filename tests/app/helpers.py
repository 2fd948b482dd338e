"""Waiting helpers for the app's asyncio tests: wait *until* something holds, never for a fixed time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

_LOGGER = logging.getLogger(__name__)


async def until(predicate: Callable[[], object], timeout: float = 3.0, what: str = "condition") -> None:
    """Like ``qtbot.waitUntil`` for plain asyncio: yield to the loop until ``predicate()`` is truthy."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)
