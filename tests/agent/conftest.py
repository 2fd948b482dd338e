"""Fixtures of the agent tests: a port range, managers that clean up their runtimes (the model file is
tests/conftest.py's)."""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent.manager import InstanceManager
from agent.paths import AgentPaths
from agent.records import ProcessRecords
from agent.runtimes.catalog import RuntimeCatalog
from agent.runtimes.llamacpp import LlamaCppDriver
from agent.runtimes.run import RuntimeRun
from tests.fakes.ports import free_port_block

_LOGGER = logging.getLogger(__name__)


@pytest.fixture
def port_base() -> int:
    """A first runtime port away from the default 18080 (and below the ephemeral range), with the
    next 20 ports free, so tests neither meet a real agent nor each other."""
    return free_port_block(20)


@pytest.fixture
async def make_manager(tmp_path: Path, port_base: int) -> AsyncIterator[Callable[..., InstanceManager]]:
    """``make_manager(exe)``: an InstanceManager on ``tmp_path/agent``; its runtimes die at teardown."""
    made: list[InstanceManager] = []
    runs: list[RuntimeRun] = []

    def make(exe: Path | None, home: Path | None = None, environ: dict[str, str] | None = None,
             runtime_roots: list[Path] | None = None) -> InstanceManager:
        paths = AgentPaths(home or tmp_path / "agent").ensure()
        catalog = RuntimeCatalog(exe, environ=environ if environ is not None else {"PATH": ""},
                                 distribution="no-such-distribution", runtime_roots=runtime_roots or [])
        manager = InstanceManager(LlamaCppDriver(paths, catalog), ProcessRecords(paths.records_file), port_base)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        runs.extend(manager.runs().values())
        await manager.close()
    for run in runs:
        run.process.signal_group(signal.SIGKILL)
        await run.process.wait()
