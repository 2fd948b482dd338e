"""The last lines of a runtime's log file, kept in memory for the logs stream and error reports.

The runtime writes to a file (never a pipe: it must outlive the agent); a ``LogTailer`` task reads
what the file gained into a ``LogRing``. The tailer also records when the file last grew, which is
how a loading runtime shows it is still making progress.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from pathlib import Path

RING_LINES = 2000
TAIL_POLL_S = 0.1
MAX_LINE_BYTES = 64 * 1024
ADOPT_BACKLOG_BYTES = 256 * 1024


class LogRing:
    """A bounded list of log lines with a running count, and a way to wait for more."""

    def __init__(self, maxlen: int = RING_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=maxlen)
        self._total = 0
        self._changed = asyncio.Event()

    @property
    def total(self) -> int:
        """How many lines were ever appended (a position for ``since``)."""
        return self._total

    def append(self, lines: list[str]) -> None:
        if not lines:
            return
        self._lines.extend(lines)
        self._total += len(lines)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def tail(self, count: int) -> list[str]:
        if count <= 0:
            return []
        return list(self._lines)[-count:]

    def since(self, position: int) -> list[str]:
        """Lines appended after ``position`` that are still held."""
        missing = self._total - position
        return self.tail(min(missing, len(self._lines)))

    async def wait_beyond(self, position: int) -> None:
        """Return once more than ``position`` lines were appended."""
        while self._total <= position:
            await self._changed.wait()


class LogTailer:
    """Follows one log file into a ring until stopped."""

    def __init__(self, path: Path, ring: LogRing, *, from_end: bool = False) -> None:
        self.path = path
        self.ring = ring
        self.last_growth = time.monotonic()
        self._offset = 0
        self._partial = b""
        self._task: asyncio.Task[None] | None = None
        self.first_line = ring.total  # where this file's lines begin in the (per-instance) ring
        if from_end:
            self._load_backlog()

    def _load_backlog(self) -> None:
        """For an adopted runtime: the file's recent lines, then follow from its end."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return
        self._offset = max(0, size - ADOPT_BACKLOG_BYTES)
        if self._offset:  # skip the line the window cuts in half
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                self._offset += len(fh.readline())
        self.read_available()

    def read_available(self) -> int:
        """Read what the file gained since the last call; the number of bytes read."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return 0
        if not data:
            return 0
        self._offset += len(data)
        self.last_growth = time.monotonic()
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            chunks.append(self._partial)
            self._partial = b""
        self.ring.append([_decode(c) for c in chunks])
        return len(data)

    def lines(self, count: int) -> list[str]:
        """The last ``count`` lines of this file (not of earlier runs sharing the ring)."""
        return self.ring.since(self.first_line)[-count:] if count > 0 else []

    def flush(self) -> None:
        """Read to the end and keep an unterminated last line too (the process has exited)."""
        self.read_available()
        if self._partial:
            self.ring.append([_decode(self._partial)])
            self._partial = b""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"tail {self.path.name}")

    async def _run(self) -> None:
        while True:
            self.read_available()
            await asyncio.sleep(TAIL_POLL_S)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")
