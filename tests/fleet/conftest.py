"""Fixtures of the fleet tests: a fake runtime, agents as processes, namespaces, a daemon
with no local agent."""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import RunningDaemon, running_daemon
from tests.fakes import write_fake_runtime
from tests.fleet.agents import AgentProcess, spawn_agent
from tests.fleet.netns import Namespace, NamespaceUnavailable, create_namespace

_LOGGER = logging.getLogger(__name__)

# Runtime ports per agent, away from 18080 and from the agent tests' 20000-32000 blocks.
_PORT_BLOCKS = itertools.cycle(random.sample(range(33000, 40000, 40), 150))


@pytest.fixture
def runtime_exe(tmp_path: Path) -> Path:
    return write_fake_runtime(tmp_path / "bin", token_delay_s=0.01, tokens=8)


@pytest.fixture
async def rd(tmp_path: Path) -> AsyncIterator[RunningDaemon]:
    """A daemon with no local agent that probes its paired nodes every half second (1 s timeout)."""
    async with running_daemon(tmp_path / "daemon", None, local_agent=False,
                              nodes={"interval_s": 0.5, "probe_timeout_s": 1.0}) as running:
        yield running


@pytest.fixture
async def agents(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await agents("alpha")``: an agent process with its own home and port; stopped at teardown."""
    started: list[AgentProcess] = []

    async def start(name: str, **kw: Any) -> AgentProcess:
        kw.setdefault("llama_server", runtime_exe)
        kw.setdefault("first_port", next(_PORT_BLOCKS))
        agent = await spawn_agent(kw.pop("home", tmp_path / f"agent-{name}"), name=name, **kw)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        await agent.stop()


@pytest.fixture
def netns() -> Iterator[Callable[[], Namespace]]:
    """``netns()``: a network namespace joined to this one by a veth pair; removed even on failure."""
    made: list[Namespace] = []

    def make() -> Namespace:
        try:
            ns = create_namespace(len(made))
        except NamespaceUnavailable as exc:
            pytest.skip(f"network namespaces are unavailable here: {exc}")
        made.append(ns)
        return ns

    yield make
    for ns in reversed(made):
        ns.destroy()
