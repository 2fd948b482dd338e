"""The daemon's background tasks: started by its parts, cancelled together when it stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


class Background:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[Any]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` until it ends or the daemon stops."""
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def cancel_all(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
