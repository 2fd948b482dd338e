"""A node that reboots gets its models back: an agent in its own network namespace is killed with
its runtimes (the machine goes down) and started again on the same home and address (it comes
back up); the daemon, which kept running, starts again there the models that were running and not
stopped by hand, and its auto-start ones, and leaves the one stopped by hand stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.api.models import ModelState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fleet.agents import eventually

pytestmark = [pytest.mark.netns, pytest.mark.slow]

MONITOR = {"interval_s": 0.5, "probe_timeout_s": 1.0, "offline_after": 3}


async def _state(rd: RunningDaemon, model_id: str) -> ModelState:
    return (await rd.client.get_model(model_id)).status.state


async def test_a_node_that_reboots_gets_its_models_back(netns: Any, agents: Any, tmp_path: Path,
                                                        model_file: Path) -> None:
    ns = netns()
    where = {"home": tmp_path / "agent-remote", "host": ns.ns_ip, "port": 9443, "netns": ns.name}
    agent = await agents("remote", **where)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=MONITOR) as rd:
        pairing = agent.last("pairing")
        node = await rd.client.pair_node(f"{ns.ns_ip}:9443", pairing["code"], pairing["fingerprint"])
        await rd.client.create_model(model("far", str(model_file), node=node.id))
        await rd.client.create_model(model("boot", str(model_file), node=node.id, auto_start=True))
        await rd.client.create_model(model("idle", str(model_file), node=node.id))
        before = {m: await rd.client.start_model(m, wait=True) for m in ("far", "idle")}
        assert all(s.state == ModelState.READY for s in before.values())
        await rd.client.stop_model("idle")  # stopped by hand: it stays stopped

        await agent.stop()  # the machine goes down: its agent and runtimes are gone
        await eventually(lambda: _is(rd, "far", ModelState.STOPPED), timeout=60, what="the node seen down")
        assert not (await rd.client.get_model("far")).status.pid

        await agents("remote", **where)  # ... and comes back up, with nothing running
        far = await eventually(lambda: _ready(rd, "far"), timeout=90, what="far started again on the node")
        boot = await eventually(lambda: _ready(rd, "boot"), timeout=90, what="the auto-start model started")
        assert far.pid != before["far"].pid and boot.node == far.node == node.id
        assert await _state(rd, "idle") == ModelState.STOPPED
        body = {"model": "far", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as session, session.post(f"{rd.v1}/chat/completions", json=body) as r:
            assert r.status == 200 and json.loads(await r.text())["model"] == "far"


async def _is(rd: RunningDaemon, model_id: str, state: ModelState) -> bool:
    return await _state(rd, model_id) == state


async def _ready(rd: RunningDaemon, model_id: str):  # type: ignore[no-untyped-def]
    status = (await rd.client.get_model(model_id)).status
    return status if status.state == ModelState.READY else None
