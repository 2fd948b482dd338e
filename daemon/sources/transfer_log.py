"""What the Downloads page shows of each transfer beyond the agent's own view: speed, ETA, history.

``RateMeter`` turns the progress a node reports into bytes per second (smoothed) and the seconds left;
``TransferLog`` keeps the newest ``KEEP_FINISHED`` finished transfers in ``{home}/transfers.json``, so
they are listed again after the daemon restarts. ``daemon.sources.transfers`` uses both; the verbs
(pause, resume, cancel, retry) are in ``daemon.sources.downloads``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from core.json_store import write_json_atomic
from daemon.api.sources import Transfer

_LOGGER = logging.getLogger(__name__)

KEEP_FINISHED = 100
SMOOTHING = 0.3  # weight of the newest sample in the speed
Clock = Callable[[], float]


class RateMeter:
    """Bytes per second of one running transfer, smoothed, and the seconds it has left."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._last: tuple[float, int] | None = None
        self.speed: float | None = None

    def sample(self, done: int) -> float | None:
        now = self._clock()
        if self._last is not None and done >= self._last[1] and now > self._last[0]:
            rate = (done - self._last[1]) / (now - self._last[0])
            self.speed = rate if self.speed is None else SMOOTHING * rate + (1 - SMOOTHING) * self.speed
        elif self._last is not None and done < self._last[1]:
            self.speed = None  # it started over
        self._last = (now, done)
        return self.speed

    @staticmethod
    def eta(speed: float | None, done: int, total: int | None) -> float | None:
        if not speed or total is None or total < done:
            return None
        return (total - done) / speed


class TransferLog:
    """The newest finished transfers in one JSON file, written whole and atomically."""

    def __init__(self, path: Path, keep: int = KEEP_FINISHED) -> None:
        self.path = path
        self.keep = keep

    def load(self) -> list[Transfer]:
        try:
            rows = json.loads(self.path.read_text(encoding="utf-8"))
            return [Transfer.model_validate(row) for row in rows][-self.keep:]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, ValidationError) as exc:
            _LOGGER.warning("the transfer history in %s is unreadable (%s); starting an empty one", self.path, exc)
            return []

    def save(self, finished: list[Transfer]) -> None:
        rows = [t.model_dump(mode="json", exclude={"result"}) for t in finished[-self.keep:]]
        write_json_atomic(self.path, rows, mode=0o600)
