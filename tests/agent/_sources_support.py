"""An agent over real mutual TLS with the seams of admission and downloads in the test's hands."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.models import InstanceState
from agent.deps import AgentDeps, build_deps
from agent.identity import server_ssl_context
from agent.server import create_app, start_server
from tests.agent._support import eventually, issue_tls
from tests.fakes import FakeGpuProbe
from tests.fakes.listener import CountingListener

_LOGGER = logging.getLogger(__name__)


@dataclass
class SourcesAgent:
    deps: AgentDeps
    client: AgentClient

    @property
    def models_dir(self) -> Path:
        return self.deps.paths.models_dir

    async def state(self, instance_id: str, *states: InstanceState, timeout: float = 30) -> InstanceState:
        async def probe() -> InstanceState | None:
            try:
                info = await self.client.instance(instance_id)
            except AgentError:
                return None
            return info.state if info.state in states else None

        return await eventually(probe, timeout, what=f"{instance_id} in {states}")  # type: ignore[no-any-return]


@asynccontextmanager
async def sources_agent(tmp_path: Path, exe: Path | None, port_base: int, **deps: Any) -> AsyncIterator[SourcesAgent]:
    """An agent on 127.0.0.1 (mTLS) with ``deps`` (memory_probe, admission_policy, gpu_probe...)."""
    home = tmp_path / "agent"
    tls = issue_tls(tmp_path, home / "identity")
    deps.setdefault("gpu_probe", FakeGpuProbe([]))
    built = build_deps(home, llama_server=exe, telemetry_interval_s=0.2, first_port=port_base, **deps)
    runner, port = await start_server(create_app(built), "127.0.0.1", 0, server_ssl_context(built.identity))
    client = AgentClient(f"https://127.0.0.1:{port}", tls.client_context())
    try:
        yield SourcesAgent(built, client)
    finally:
        for instance_id in list(built.manager.runs()):
            await built.manager.stop(instance_id, timeout=2)
        await client.close()
        await runner.cleanup()


def processes_running(path: Path | str) -> list[int]:
    """Pids of processes whose command line names ``path``: what a spawn would have left."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(path) in part for part in proc.info["cmdline"] or []):
                found.append(proc.info["pid"])
        except (psutil.Error, TypeError):
            continue
    return found


@pytest.fixture
async def listener() -> AsyncIterator[Callable[..., Awaitable[CountingListener]]]:
    """``await listener(host="127.0.0.1", redirect_to=None)``: a connection-counting listener."""
    made: list[CountingListener] = []

    async def make(host: str = "127.0.0.1", **kw: Any) -> CountingListener:
        made.append(await CountingListener(host, **kw).start())
        return made[-1]

    yield make
    for item in made:
        await item.close()
