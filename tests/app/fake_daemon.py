"""``FakeDaemonClient``: the tests' in-memory ``DemoDaemon``, bare, with what the tests control.

The daemon itself is ``memory_daemon.DemoDaemon(models)``: a bare daemon with just these (stopped) models,
one machine, no keys, no jobs, nothing made up. This subclass adds only the test controls: every call is
recorded in ``calls`` (``called(name)`` lists one method's), ``fail_next[method]`` fails one call,
and ``auto_ready`` makes a started model become ready on the next loop turn. What the daemon lets a
test set directly (``unreachable``, ``hosts``, ``history``, ``log_lines``, ``base_model_files``,
``set_state``, ``publish``, ``restart_daemon``, ``add_waiting_agent``, ...) is the fake's own.
"""

from __future__ import annotations

from typing import Any

from helpers import definition
from memory_daemon import DemoDaemon

from daemon.api.client import DaemonError
from daemon.api.models import ModelDefinition

__all__ = ["FakeDaemonClient", "definition"]


class FakeDaemonClient(DemoDaemon):
    def __init__(self, models: list[ModelDefinition] | None = None) -> None:
        super().__init__(list(models or []))
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail_next: dict[str, DaemonError] = {}

    @property
    def auto_ready(self) -> bool:
        return self.ready_after is not None

    @auto_ready.setter
    def auto_ready(self, on: bool) -> None:
        self.ready_after = 0.0 if on else None

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        super()._record(name, *args)
        if name in self.fail_next:
            raise self.fail_next.pop(name)

    def called(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]
