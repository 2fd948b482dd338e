"""An agent run in another program's event loop: the demo's nodes (``mirbadllm.demo``) and the
tests' agents (``tests/fleet/inprocess.py``).

The whole lifecycle runs as under ``mirbadllm agent`` (``agent.lifecycle``: pairing, listening,
pairing again after an unpair); what it would print is kept instead, its events in ``events`` and
its banner in ``banner``. ``deps`` holds each composition it built (one per listening period), so
``close`` stops the runtimes every one of them started.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from agent.deps import AgentDeps, build_deps
from agent.lifecycle import AgentLifecycle
from agent.paths import AgentPaths

EVENT_POLL_S = 0.05


@dataclass
class InProcessAgent:
    home: Path
    lifecycle: AgentLifecycle
    stop_event: asyncio.Event
    task: asyncio.Task[int]
    events: list[dict[str, Any]] = field(default_factory=list)
    banner: list[str] = field(default_factory=list)
    deps: list[AgentDeps] = field(default_factory=list)

    @classmethod
    async def start(cls, home: Path, *, name: str, version: str, **build: Any) -> Self:
        """An agent on a free loopback port with its home at ``home``, once it listens; ``build``:
        ``agent.deps.build_deps``'s keywords (its probes, runtime binary, first port...)."""
        made: list[AgentDeps] = []

        def build_one() -> AgentDeps:
            deps = build_deps(home, **build)
            deps.version = version  # what its status reports, as ``agent.main`` sets it
            made.append(deps)
            return deps

        events: list[dict[str, Any]] = []
        banner: list[str] = []
        lifecycle = AgentLifecycle(AgentPaths(home).ensure(), "127.0.0.1", 0, build_one, name=name, version=version,
                                   mdns=False, emit=events.append, banner=banner.append)
        stop = asyncio.Event()
        agent = cls(home, lifecycle, stop, asyncio.ensure_future(lifecycle.run(stop)), events, banner, made)
        await agent.said("listening")
        return agent

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.lifecycle.port}"

    @property
    def url(self) -> str:
        return f"https://{self.address}"

    def last(self, kind: str) -> dict[str, Any]:
        """The latest event of ``kind`` (IndexError: none yet)."""
        return [e for e in self.events if e["event"] == kind][-1]

    async def said(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        """The latest event of ``kind``, once there is one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not any(e["event"] == kind for e in self.events):
            if loop.time() > deadline or self.task.done():
                raise TimeoutError(f"the agent {self.lifecycle.name!r} did not say {kind!r}")
            await asyncio.sleep(EVENT_POLL_S)
        return self.last(kind)

    async def close(self) -> None:
        """Stop the agent, then every runtime its compositions started."""
        self.stop_event.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 20)
        for deps in self.deps:
            for instance_id in list(deps.manager.runs()):
                await deps.manager.stop(instance_id, timeout=2)
            await deps.manager.close()
