"""Agents upgraded from the daemon one node at a time, with their runtimes adopted (two agent processes).

Each agent reports the version written in its version file (``MIRBADLLM_AGENT_VERSION_FILE``) and
its upgrade target is that file, so the "build" a release ships is the new version's text, swapped
in by the agent's real installer. ``ServiceLoop`` plays systemd: it starts an agent again when it
exits 75.
"""

from __future__ import annotations

import asyncio
import base64
import platform
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agent.api.upgrade import agent_platform
from core.releases.feed import feed_bytes, make_feed
from core.releases.signing import public_key_b64
from daemon.api.models import ModelState
from daemon.api.upgrades import NodeUpgradeState, RolloutState, RolloutView
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fleet.agents import eventually
from tests.fleet.service_loop import ServiceLoop
from tests.fleet.test_fleet_loopback import FAST_MONITOR, pair

pytestmark = pytest.mark.slow

OLD, NEW = "0.1.0", "0.2.0"
PLATFORM = agent_platform(platform.system(), platform.machine())
FAST_UPGRADES = {"poll_interval_s": 0.1}  # a restarted node is asked again every 0.1 s, not every 0.5 s


def stage_release(rd: RunningDaemon, tmp_path: Path) -> None:
    """A signed feed for NEW with this machine's agent build, staged where the daemon looks."""
    folder = rd.daemon.upgrades.default_folder
    folder.mkdir(parents=True)
    build = folder / f"mirbadllm-agent-{NEW}"
    build.write_text(f"{NEW}\n")
    assert PLATFORM is not None
    data = feed_bytes(make_feed(NEW, {PLATFORM: build}))
    key = Ed25519PrivateKey.generate()
    (folder / "feed.json").write_bytes(data)
    (folder / "feed.json.sig").write_bytes(base64.b64encode(key.sign(data)) + b"\n")
    rd.daemon.upgrades.trusted_keys = (public_key_b64(key),)


async def service(agents: Any, tmp_path: Path, name: str, log: list[tuple[str, str]],
                  restart: bool = True) -> ServiceLoop:
    home = tmp_path / f"agent-{name}"
    home.mkdir(parents=True)
    version_file = home / "version.txt"
    version_file.write_text(f"{OLD}\n")
    port: list[int] = []

    async def start() -> Any:
        agent = await agents(name, home=home, port=port[0] if port else 0,
                             extra=["--upgrade-target", str(version_file)],
                             env={"MIRBADLLM_AGENT_VERSION_FILE": str(version_file), "MIRBADLLM_NO_MDNS": "1"})
        port[:] = [agent.port]
        return agent

    loop = ServiceLoop(name, start, log, restart=restart)
    await loop.begin()
    return loop


@pytest.fixture
async def loops() -> AsyncIterator[list[ServiceLoop]]:
    made: list[ServiceLoop] = []
    yield made
    for loop in made:
        await loop.close()


async def rollout_end(rd: RunningDaemon) -> tuple[RolloutView, list[tuple[str, str]]]:
    """Follow the event feed until the rollout finishes; the (node, state) of each upgrade.node event."""
    since, seen = 0, []
    while True:
        page = await rd.client.events(since, timeout=10)
        since = page.last_id
        for event in page.events:
            if event.type == "upgrade.node":
                seen.append((event.data["node"], event.data["state"]))
            if event.type == "upgrade.finished":
                return await rd.client.upgrade_status(), seen


async def start_models(rd: RunningDaemon, model_file: Path, nodes: dict[str, str]) -> dict[str, int]:
    """``on-NAME`` on each node, all started at once; their PIDs by node name."""
    async def start(name: str, node_id: str) -> int:
        await rd.client.create_model(model(f"on-{name}", str(model_file), node=node_id))
        status = await rd.client.start_model(f"on-{name}", wait=True)
        assert status.state == ModelState.READY and status.pid, status.error
        return status.pid

    return dict(zip(nodes, await asyncio.gather(*(start(name, node_id) for name, node_id in nodes.items())),
                    strict=True))


async def test_nodes_are_upgraded_one_at_a_time_and_keep_their_runtimes(
        agents: Any, loops: list[ServiceLoop], tmp_path: Path, model_file: Path) -> None:
    log: list[tuple[str, str]] = []
    alpha, beta = await asyncio.gather(service(agents, tmp_path, "alpha", log), service(agents, tmp_path, "beta", log))
    loops += [alpha, beta]
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR,
                              upgrades=FAST_UPGRADES) as rd:
        ids = {"alpha": await pair(rd, alpha.agent), "beta": await pair(rd, beta.agent)}
        pids = await start_models(rd, model_file, ids)
        assert {n.version for n in await rd.client.list_nodes()} == {OLD}
        stage_release(rd, tmp_path)

        started = await rd.client.start_upgrade()
        assert started.state == RolloutState.RUNNING and started.version == NEW
        view, seen = await rollout_end(rd)

        assert view.state == RolloutState.DONE, view.reason
        assert [(n.name, n.state, n.from_version) for n in view.nodes] == [
            ("alpha", NodeUpgradeState.DONE, OLD), ("beta", NodeUpgradeState.DONE, OLD)]
        a, b = ids["alpha"], ids["beta"]
        assert seen == [(a, "upgrading"), (a, "done"), (b, "upgrading"), (b, "done")]
        # Strictly one at a time: beta was told (and went down) only once alpha was back.
        assert log == [("alpha", "exit 75"), ("alpha", "back"), ("beta", "exit 75"), ("beta", "back")]
        assert len(alpha.runs) == len(beta.runs) == 2

        for name, node_id in ids.items():
            node = await eventually(lambda n=node_id: _node_at(rd, n, NEW), what=f"{name} reporting {NEW}")
            assert node.version == NEW
            status = await eventually(lambda m=f"on-{name}": _ready(rd, m), what=f"on-{name} ready again")
            assert status.pid == pids[name]  # adopted by the new agent, never restarted
        assert alpha.agent.runtime_pids() == [pids["alpha"]] and beta.agent.runtime_pids() == [pids["beta"]]


async def test_a_node_that_does_not_come_back_stops_the_rollout_before_the_next(
        agents: Any, loops: list[ServiceLoop], tmp_path: Path, model_file: Path) -> None:
    log: list[tuple[str, str]] = []
    alpha, beta = await asyncio.gather(service(agents, tmp_path, "alpha", log, restart=False),  # its "systemd"
                                       service(agents, tmp_path, "beta", log))                # never restarts it
    loops += [alpha, beta]
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR,
                              upgrades={**FAST_UPGRADES, "ready_timeout_s": 1.5}) as rd:
        ids = {"alpha": await pair(rd, alpha.agent), "beta": await pair(rd, beta.agent)}
        await start_models(rd, model_file, ids)
        stage_release(rd, tmp_path)

        await rd.client.start_upgrade()
        view, seen = await rollout_end(rd)

        assert view.state == RolloutState.FAILED
        assert view.reason is not None and "node alpha" in view.reason and "within 1.5 s" in view.reason
        assert "not upgraded" in view.reason
        states = [(n.name, n.state) for n in view.nodes]
        assert states == [("alpha", NodeUpgradeState.FAILED), ("beta", NodeUpgradeState.PENDING)]
        assert seen == [(ids["alpha"], "upgrading"), (ids["alpha"], "failed")]
        assert log == [("alpha", "exit 75")]  # beta was never told
        assert beta.agent.process.returncode is None and len(beta.runs) == 1
        assert (await rd.client.get_node(ids["beta"])).version == OLD


async def _node_at(rd: RunningDaemon, node_id: str, version: str) -> Any:
    node = await rd.client.get_node(node_id)
    return node if node.version == version else None


async def _ready(rd: RunningDaemon, model_id: str) -> Any:
    status = (await rd.client.get_model(model_id)).status
    return status if status.state == ModelState.READY else None
