"""Background tasks every program runs the same way.

``cancel_and_wait`` is how an owner stops the task it started (a watcher, a poller, a
container's creation): cancelled, then awaited so nothing of it runs on after ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

_LOGGER = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (None or already done: nothing to do) and wait until it has ended."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

