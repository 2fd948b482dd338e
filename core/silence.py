"""How the relay ends an SSE answer early: silence (``core.relay.Silence``) and a server's stop.

The policy is the relay's (``core.relay``'s docstring); these are its watches. ``StallWatch``: an
answer whose events flow is cut once the relay has waited on its upstream for ``stall_after_s``
(one ``_Ticker`` per loop and period checks them all: an answer costs a set entry, not a timer).
``PromptWatch``: before the first event, the runtime's prompt progress polled in a task of its
own. ``Endings``: the answers a server relays now, ended with an event when it stops. Each sets
an exception on the upstream's stream (``Stalled``, ``Ending``) that the relay's next read raises.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

import aiohttp


class Stalled(Exception):
    """Set on the upstream's stream by the silence watch: its next read raises it."""


class PromptStalled(Exception):
    """Raised while the first event is awaited: the runtime's prompt progress stood still."""


class PromptWatch:
    """Polls the runtime's prompt progress in a task of its own; ``stopped`` says when it last
    changed more than ``stall_after_s`` ago (a poll with no answer is no change)."""

    __slots__ = ("changed", "loop", "task")

    def __init__(self, stall_after_s: float, poll: Callable[[], Awaitable[int | None]]) -> None:
        self.loop = asyncio.get_running_loop()
        self.changed = self.loop.time()
        self.task = self.loop.create_task(self._poll(stall_after_s, poll))

    async def _poll(self, stall_after_s: float, poll: Callable[[], Awaitable[int | None]]) -> None:
        period, last = max(0.05, stall_after_s / 4), None
        while True:
            try:
                async with asyncio.timeout(stall_after_s):  # an unanswered poll is no progress
                    seen = await poll()
            except Exception:  # noqa: BLE001 - a runtime that cannot say is not progressing
                seen = None
            if seen is not None and seen != last:
                self.changed, last = self.loop.time(), seen
            await asyncio.sleep(period)

    def stopped(self, stall_after_s: float) -> bool:
        return self.loop.time() - self.changed >= stall_after_s

    def cancel(self) -> None:
        self.task.cancel()


class StallWatch:
    """Checked every quarter of the stall time (by its ``_Ticker``); cuts the read the relay has
    waited on for too long."""

    __slots__ = ("content", "loop", "reading", "since", "stall_after_s", "ticker")

    def __init__(self, content: aiohttp.StreamReader, stall_after_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.content, self.stall_after_s = content, stall_after_s
        self.reading, self.since = False, 0.0
        self.ticker = _ticker(self.loop, max(0.05, stall_after_s / 4))
        self.ticker.add(self)

    def cancel(self) -> None:
        self.ticker.watches.discard(self)


class _Ticker:
    """One timer for the watches of a loop that share a period, ticking while any is open: an
    answer costs a set entry, not a timer of its own."""

    __slots__ = ("handle", "period", "watches")

    def __init__(self, period: float) -> None:
        self.period = period  # no reference to the loop: it keys the tickers weakly
        self.watches: set[StallWatch] = set()
        self.handle: asyncio.TimerHandle | None = None

    def add(self, watch: StallWatch) -> None:
        self.watches.add(watch)
        if self.handle is None:
            self.handle = watch.loop.call_later(self.period, self.tick)

    def tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for watch in [w for w in self.watches if w.reading and now - w.since >= w.stall_after_s]:
            self.watches.discard(watch)
            watch.content.set_exception(Stalled())
        self.handle = loop.call_later(self.period, self.tick) if self.watches else None


_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _Ticker]] = weakref.WeakKeyDictionary()


def _ticker(loop: asyncio.AbstractEventLoop, period: float) -> _Ticker:
    tickers = _TICKERS.get(loop)
    if tickers is None:
        tickers = _TICKERS[loop] = {}
    ticker = tickers.get(period)
    if ticker is None:
        ticker = tickers[period] = _Ticker(period)
    return ticker


class Ending(Exception):
    """Set on the upstream's stream by ``Endings.finish``: the server stops."""


class Endings:
    """The SSE answers a server relays now, so that its stop ends each with an error event."""

    def __init__(self, what: str = "the server") -> None:
        self.what = what  # who stops, in the event's message ("the MirbadLLM daemon")
        self._open: set[aiohttp.StreamReader] = set()
        self._empty = asyncio.Event()
        self._empty.set()

    def add(self, content: aiohttp.StreamReader) -> None:
        self._open.add(content)
        self._empty.clear()

    def discard(self, content: aiohttp.StreamReader) -> None:
        self._open.discard(content)
        if not self._open:
            self._empty.set()

    def __len__(self) -> int:
        return len(self._open)

    async def finish(self, grace_s: float) -> int:
        """Wait up to ``grace_s`` for the answers in flight to end, then end the rest: each gets one
        error event and its connection is cut. Returns how many were ended."""
        if self._open:
            try:
                async with asyncio.timeout(grace_s):
                    await self._empty.wait()
            except TimeoutError:
                pass
        ended = list(self._open)
        for content in ended:
            content.set_exception(Ending())
        return len(ended)
