"""Live logs of one model: follows ``DaemonApi.logs(follow=True)``, with pause and search.

Lines are batched (one notification per ``flush_s``) so a chatty runtime cannot flood the widget;
while paused, lines keep arriving into the buffer and are shown on resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from app.viewmodels.observable import Emitter, Observable
from daemon.api.client import DaemonError
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogsState:
    model_id: str | None = None
    following: bool = False
    paused: bool = False
    query: str = ""
    error: str | None = None


class LogsViewModel:
    def __init__(self, client: DaemonApi, *, max_lines: int = 5000, tail: int = 500, flush_s: float = 0.1,
                 retry_s: float = 2.0) -> None:
        self.client = client
        self.state: Observable[LogsState] = Observable(LogsState())
        self.appended: Emitter[tuple[str, ...]] = Emitter()  # new visible lines
        self.reset: Emitter[tuple[str, ...]] = Emitter()  # replace everything shown
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._pending: list[str] = []
        self._tail = tail
        self._flush_s = flush_s
        self._retry_s = retry_s
        self._task: asyncio.Task[None] | None = None
        self._flush_handle: asyncio.Handle | None = None

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(self._lines)

    def visible(self) -> tuple[str, ...]:
        query = self.state.value.query.lower()
        return tuple(ln for ln in self._lines if query in ln.lower()) if query else tuple(self._lines)

    def text(self) -> str:
        """What Copy puts on the clipboard: the visible (filtered) lines."""
        return "\n".join(self.visible())

    def follow(self, model_id: str | None) -> None:
        if model_id == self.state.value.model_id and (self._task is not None or model_id is None):
            return
        self.stop()
        self._lines.clear()
        self._pending.clear()
        self.state.set(LogsState(model_id=model_id, following=model_id is not None,
                                 query=self.state.value.query))
        self.reset.emit(())
        if model_id is not None:
            self._task = asyncio.ensure_future(self._run(model_id))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def set_paused(self, paused: bool) -> None:
        s = self.state.value
        self.state.set(LogsState(s.model_id, s.following, paused, s.query, s.error))
        if not paused:
            self._flush()

    def set_query(self, query: str) -> None:
        s = self.state.value
        self.state.set(LogsState(s.model_id, s.following, s.paused, query, s.error))
        self.reset.emit(self.visible())

    async def _run(self, model_id: str) -> None:
        first = True
        while True:
            try:
                async for line in self.client.logs(model_id, tail=self._tail if first else 0, follow=True):
                    self._take(line)
                first = False
            except DaemonError as exc:
                self._set_error(f"logs unavailable: {exc.message}")
            await asyncio.sleep(self._retry_s)

    def _set_error(self, error: str | None) -> None:
        s = self.state.value
        self.state.set(LogsState(s.model_id, s.following, s.paused, s.query, error))

    def _take(self, line: str) -> None:
        line = line.rstrip("\n")
        self._lines.append(line)
        self._pending.append(line)
        if self.state.value.error:
            self._set_error(None)
        if self._flush_handle is None and not self.state.value.paused:
            self._flush_handle = asyncio.get_running_loop().call_later(self._flush_s, self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        if self.state.value.paused or not self._pending:
            return
        query = self.state.value.query.lower()
        batch = tuple(ln for ln in self._pending if query in ln.lower()) if query else tuple(self._pending)
        self._pending.clear()
        if batch:
            self.appended.emit(batch)
