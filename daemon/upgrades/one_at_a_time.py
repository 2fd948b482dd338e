"""``OneRolloutAtATime``: what the agent rollout (``daemon.upgrades.manager``) and the llama.cpp
build rollout (``daemon.runtimes.manager``) share: the paired nodes to walk, at most one rollout
task at a time, its events on the bus, and its end when the daemon stops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from core.tasks import cancel_and_wait
from daemon.api.nodes import NodeView
from daemon.api.upgrades import RolloutView
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.nodes.links import Links
from daemon.upgrades.rollout import NodeTarget, rollout_targets


class OneRolloutAtATime:
    def __init__(self, nodes: Callable[[], list[NodeView]], links: Links, events: EventBus) -> None:
        self._nodes = nodes  # the paired nodes in the order of /api/nodes
        self._links = links
        self._events = events
        self._task: asyncio.Task[RolloutView] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _targets(self, none_message: str) -> list[NodeTarget]:
        """The paired, linked nodes a rollout walks; 409 ``no_nodes`` (``none_message``) when there are none."""
        targets = rollout_targets(self._nodes(), self._links)
        if not targets:
            raise DaemonProblem(409, "no_nodes", none_message)
        return targets

    def _launch(self, run: Coroutine[Any, Any, RolloutView], name: str) -> asyncio.Task[RolloutView]:
        self._task = asyncio.get_running_loop().create_task(run, name=name)
        return self._task

    def _publish(self, type_: str, **data: Any) -> None:
        self._events.publish(type_, None, **data)

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
