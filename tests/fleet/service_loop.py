"""A tiny stand-in for systemd in tests: start the agent again when it exits 75 (``EXIT_RESTART``).

Every exit and every return is appended to one shared ``log``, so a test can assert the order in
which several nodes went down and came back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agent.service.units import EXIT_RESTART
from tests.fleet.agents import AgentProcess

_LOGGER = logging.getLogger(__name__)


@dataclass
class ServiceLoop:
    name: str
    start: Callable[[], Awaitable[AgentProcess]]
    log: list[tuple[str, str]]
    restart: bool = True
    runs: list[AgentProcess] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    @property
    def agent(self) -> AgentProcess:
        return self.runs[-1]

    async def begin(self) -> AgentProcess:
        self.runs.append(await self.start())
        self._task = asyncio.ensure_future(self._supervise())
        return self.agent

    async def _supervise(self) -> None:
        while True:
            code = await self.agent.process.wait()
            self.log.append((self.name, f"exit {code}"))
            if code != EXIT_RESTART or not self.restart:
                return
            self.runs.append(await self.start())
            self.log.append((self.name, "back"))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
