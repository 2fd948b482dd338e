"""``EventFeed``: long-polls the daemon's event ring and keeps the app in step with it.

The daemon numbers events monotonically within one run (``boot_id``). The feed asks for events
after the last id it saw; when the daemon says ``reset`` (the id fell out of the ring, or is from
the future) or the ``boot_id`` changes (the daemon restarted), the feed resyncs from
``status()`` instead of trusting the ids. While the daemon cannot be reached it retries with a
capped backoff and resyncs once it answers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from daemon.api.client import DaemonError
from daemon.api.models import Event, EventsPage

_LOGGER = logging.getLogger(__name__)

ResyncHandler = Callable[[], Awaitable[int]]
"""Reloads the whole state; returns the last event id that state includes."""
EventsHandler = Callable[[Sequence[Event]], Awaitable[None]]
ConnectionHandler = Callable[[bool, str | None], None]


class EventSource(Protocol):
    async def events(self, since: int, timeout: float = 30.0) -> EventsPage: ...


class EventFeed:
    """One long-poll loop. ``run()`` never returns until cancelled."""

    def __init__(self, client: EventSource, *, on_resync: ResyncHandler, on_events: EventsHandler,
                 on_connection: ConnectionHandler, poll_timeout: float = 30.0,
                 retry_delays: Sequence[float] = (0.5, 1.0, 2.0, 5.0, 10.0)) -> None:
        self._client = client
        self._on_resync = on_resync
        self._on_events = on_events
        self._on_connection = on_connection
        self._poll_timeout = poll_timeout
        self._retry_delays = tuple(retry_delays)
        self.since = 0
        self.boot_id: str | None = None
        self.resyncs = 0

    async def run(self) -> None:
        failures = 0
        need_resync = True
        while True:
            try:
                if need_resync:
                    await self._resync()
                    need_resync = False
                page = await self._client.events(self.since, self._poll_timeout)
                need_resync = await self._take(page)
                if failures:
                    _LOGGER.info("daemon reachable again")
                failures = 0
                self._on_connection(True, None)
            except asyncio.CancelledError:
                raise
            except DaemonError as exc:
                # Auth and server errors are retried too: the daemon may be mid-restart.
                delay = self._retry_delays[min(failures, len(self._retry_delays) - 1)]
                failures += 1
                need_resync = True
                _LOGGER.debug("event feed: %s; retrying in %.1fs", exc, delay)
                self._on_connection(False, exc.message)
                await asyncio.sleep(delay)

    async def _resync(self) -> None:
        self.since = await self._on_resync()
        # The status we just read has no boot id: the next page establishes it.
        self.boot_id = None
        self.resyncs += 1
        self._on_connection(True, None)

    async def _take(self, page: EventsPage) -> bool:
        """Apply one page; True when the caller must resync before polling again."""
        restarted = self.boot_id is not None and page.boot_id != self.boot_id
        went_back = page.last_id < self.since
        self.boot_id = page.boot_id
        if page.reset or restarted or went_back:
            _LOGGER.info("event ids reset (reset=%s, new boot=%s); resyncing", page.reset, restarted)
            return True
        fresh = [event for event in page.events if event.id > self.since]
        if fresh:
            await self._on_events(fresh)
        self.since = max(self.since, page.last_id)
        return False
