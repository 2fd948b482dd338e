"""Background tasks every program runs the same way.

``cancel_and_wait`` is how an owner stops the task it started (a watcher, a poller, a
container's creation): cancelled, then awaited so nothing of it runs on after ``stop``.
``unless_running`` keeps one read in flight: a second ask while it runs is answered by it.
``every`` is a background loop that must outlive a failed round (telemetry, node probes, runtime
packs): the round's exception is logged and the next round comes after the interval, or at once
when ``wake`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

_LOGGER = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` (None or already done: nothing to do) and wait until it has ended."""
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task



def unless_running(task: asyncio.Future[None] | None,
                   start: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Future[None]:
    """``task`` while it still runs, else a new task of ``start()``."""
    return task if task is not None and not task.done() else asyncio.ensure_future(start())


async def every(interval_s: float | Callable[[], float], one_round: Callable[[], Awaitable[object]], what: str,
                wake: asyncio.Event | None = None) -> None:
    """Run ``one_round`` now and then again ``interval_s`` after each (a callable: read before each
    wait, so a changed policy takes effect), or as soon as ``wake`` is set, until cancelled. A
    failed round is logged as "``what`` failed" and the loop goes on."""
    while True:
        try:
            await one_round()
        except Exception:
            _LOGGER.exception("%s failed", what)
        pause = interval_s() if callable(interval_s) else interval_s
        if wake is None:
            await asyncio.sleep(pause)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), pause)
        wake.clear()
