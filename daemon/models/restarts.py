"""What survives a daemon restart about crashes: the models the user wants running
(``running-models.json``) and the ones that crashed too often (``restart-pauses.json``).

``RestartBook`` is read by the orchestrator (a start by the user clears a pause) and written by the
health monitor (``daemon.models.health``), which counts the crashes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import BaseModel

from core.json_store import write_json_atomic
from daemon.api.models import ModelStatus


class RestartPause(BaseModel):
    model: str
    node: str
    crashes: int
    last_error: str | None
    since: float


class RestartBook:
    """Crash counts, pauses and the models meant to be running; the last two on disk."""

    def __init__(self, home: Path) -> None:
        self._pauses_path = home / "restart-pauses.json"
        self._running_path = home / "running-models.json"
        self.crashes: dict[str, int] = {}
        self.pauses: dict[str, RestartPause] = {}
        self.wanted: set[str] = set()

    def load(self) -> None:
        try:
            raw = json.loads(self._pauses_path.read_text(encoding="utf-8"))
            self.pauses = {p["model"]: RestartPause.model_validate(p) for p in raw}
            self.crashes = {m: p.crashes for m, p in self.pauses.items()}
        except (OSError, ValueError, KeyError, TypeError):
            self.pauses = {}
        try:
            self.wanted = set(json.loads(self._running_path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            self.wanted = set()

    def _save(self) -> None:
        write_json_atomic(self._pauses_path, [p.model_dump() for p in self.pauses.values()])

    def want(self, model_id: str, running: bool) -> None:
        before = set(self.wanted)
        (self.wanted.add if running else self.wanted.discard)(model_id)
        if before != self.wanted:
            write_json_atomic(self._running_path, sorted(self.wanted))

    def clear(self, model_id: str) -> None:
        self.crashes.pop(model_id, None)
        if self.pauses.pop(model_id, None) is not None:
            self._save()

    def pause(self, status: ModelStatus) -> RestartPause:
        pause = RestartPause(model=status.id, node=status.node, crashes=self.crashes.get(status.id, 0),
                             last_error=status.error, since=time.time())
        self.pauses[status.id] = pause
        self._save()
        return pause
