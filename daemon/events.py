"""A ring of events with monotonic ids, long-polled by the app (``GET /api/events?since=N``).

Ids restart at 1 with each daemon run; ``boot_id`` changes with them, and a client asking for an
id the ring no longer holds (or from another boot) is told to resync from ``/api/status``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from typing import Any

from daemon.api.models import Event, EventsPage


class EventBus:
    def __init__(self, size: int = 2000) -> None:
        self.boot_id = uuid.uuid4().hex
        self._ring: deque[Event] = deque(maxlen=size)
        self._last_id = 0
        self._changed = asyncio.Condition()
        self.closed = False  # the daemon is stopping (close)

    @property
    def last_id(self) -> int:
        return self._last_id

    def publish(self, type_: str, model: str | None = None, **data: Any) -> Event:
        self._last_id += 1
        event = Event(id=self._last_id, ts=time.time(), type=type_, model=model, data=data)
        self._ring.append(event)
        asyncio.get_running_loop().create_task(self._notify())
        return event

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _page(self, since: int) -> EventsPage:
        oldest = self._ring[0].id if self._ring else self._last_id + 1
        reset = since > self._last_id or (since + 1 < oldest and since != 0 and bool(self._ring))
        events = [e for e in self._ring if e.id > since] if not reset else []
        return EventsPage(boot_id=self.boot_id, last_id=self._last_id, events=events, reset=reset)

    async def close(self) -> None:
        """The daemon is stopping: every long-poll answers now (with what it has), and any later one
        at once, so a stop never waits on a client's poll (the app holds one open all the time)."""
        self.closed = True
        await self._notify()

    async def wait(self, since: int, timeout: float) -> EventsPage:
        """Events after ``since``, waiting up to ``timeout`` seconds for the first one."""
        page = self._page(since)
        if page.events or page.reset or timeout <= 0 or self.closed:
            return page
        async with self._changed:
            try:
                async with asyncio.timeout(timeout):  # wait_for can swallow a cancel on 3.11
                    await self._changed.wait_for(lambda: self._last_id > since or self.closed)
            except TimeoutError:
                pass
        return self._page(since)
