"""Two agents as separate processes on loopback: paired, placed on, routed to, removed, re-paired."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from daemon.api.nodes import NodeState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fleet.agents import AgentProcess, eventually

pytestmark = pytest.mark.slow

FAST_MONITOR = {"interval_s": 0.5, "probe_timeout_s": 1.0, "offline_after": 3}


async def chat(rd: RunningDaemon, served: str, stream: bool = False) -> tuple[int, str]:
    body = {"model": served, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session, session.post(f"{rd.v1}/chat/completions", json=body) as resp:
        return resp.status, await resp.text()


async def pair(rd: RunningDaemon, agent: AgentProcess, after: int = 0) -> str:
    pairing = await agent.wait_event("pairing", after=after)
    node = await rd.client.pair_node(agent.address, pairing["code"], pairing["fingerprint"])
    paired = await agent.wait_event("paired", after=after)
    assert node.id == paired["node_id"] and node.name == agent.last("pairing")["name"]
    return node.id


async def test_two_agents_serve_one_v1_and_a_removed_node_is_gone(agents: Any, tmp_path: Path,
                                                                  model_file: Path) -> None:
    alpha, beta = await agents("alpha"), await agents("beta")
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        # Multicast is off in tests: the user adds the address, then compares the fingerprint.
        added = await rd.client.add_node_address(alpha.address)
        assert added.discovered is not None and added.discovered.fingerprint == alpha.fingerprint
        assert [d.name for d in await rd.client.discovered_nodes()] == ["alpha"]
        a_id, b_id = await pair(rd, alpha), await pair(rd, beta)
        assert a_id != b_id and await rd.client.discovered_nodes() == []

        nodes = {n.id: n for n in await rd.client.list_nodes()}
        assert set(nodes) == {a_id, b_id}
        assert all(n.state == NodeState.ONLINE and n.memory_available for n in nodes.values())

        await rd.client.create_model(model("on-alpha", str(model_file), node=a_id))
        await rd.client.create_model(model("on-beta", str(model_file), node=b_id))
        ready_a = await rd.client.start_model("on-alpha", wait=True)
        ready_b = await rd.client.start_model("on-beta", wait=True)
        assert ready_a.state == ready_b.state == ModelState.READY, (ready_a.error, ready_b.error)
        assert ready_a.pid in alpha.runtime_pids() and ready_b.pid in beta.runtime_pids()

        for served in ("on-alpha", "on-beta"):
            status, text = await chat(rd, served)
            assert status == 200 and json.loads(text)["model"] == served
        status, text = await chat(rd, "on-beta", stream=True)
        assert status == 200 and text.rstrip().endswith("data: [DONE]")
        assert (await rd.client.get_node(a_id)).models == ["on-alpha"]
        history = await eventually(lambda: _points(rd, a_id), what="node history of alpha")
        assert history[-1].values["mem_total_bytes"]

        await rd.client.remove_node(b_id)
        assert (await beta.wait_event("unpaired"))["node_id"] == b_id
        assert [n.id for n in await rd.client.list_nodes()] == [a_id]
        view = await rd.client.get_model("on-beta")
        assert view.status.state == ModelState.STOPPED and "unknown" in (view.status.error or "")
        status, text = await chat(rd, "on-beta")
        assert status == 503 and "unknown" in json.loads(text)["error"]["message"]
        assert (await chat(rd, "on-alpha"))[0] == 200
        assert _alive([ready_b.pid]) == []  # its models were stopped before it was let go

        # Removed means a new identity: it pairs again as a new node, the model follows it there.
        again = await beta.wait_event("pairing", after=len(beta.events) - 1)
        assert again["fingerprint"] != (await beta.wait_event("pairing"))["fingerprint"]
        b2_id = await pair(rd, beta, after=beta.events.index(again))
        assert b2_id not in (a_id, b_id)
        await rd.client.update_model(model("on-beta", str(model_file), node=b2_id))
        assert (await rd.client.start_model("on-beta", wait=True)).state == ModelState.READY
        assert (await chat(rd, "on-beta"))[0] == 200


async def test_a_removed_node_that_was_not_told_is_refused_until_unpaired(agents: Any, tmp_path: Path) -> None:
    gamma = await agents("gamma")
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        old_id = await pair(rd, gamma)
        await gamma.terminate()  # unreachable while it is removed: it keeps its signed certificate
        await rd.client.remove_node(old_id)
        events = (await rd.client.events(0, timeout=0)).events
        assert any(e.type == "node.removed" and e.data["agent_unpaired"] is False for e in events)

        back = await agents("gamma", home=gamma.home, port=gamma.port)
        assert back.last("listening")["paired"] is True and back.last("listening")["node_id"] == old_id
        with pytest.raises(DaemonError) as refused:
            await rd.client.add_node_address(back.address)
        assert (refused.value.status, refused.value.code) == (409, "node_removed")
        assert "--unpair" in refused.value.message
        with pytest.raises(DaemonError) as not_pairing:
            await rd.client.pair_node(back.address, "ABCD-EFGH", old_id)
        # It answers, over mutual TLS only: a conflict with its state (409), not a bad gateway (502).
        assert (not_pairing.value.status, not_pairing.value.code) == (409, "node_removed")
        assert "--unpair" in not_pairing.value.message

        await back.terminate()
        fresh = await agents("gamma", home=gamma.home, port=gamma.port, extra=["--unpair"])
        new_id = await pair(rd, fresh)
        assert new_id != old_id
        assert (await rd.client.get_node(new_id)).state in (NodeState.ONLINE, NodeState.DEGRADED)


async def _points(rd: RunningDaemon, node_id: str) -> list[Any]:
    return (await rd.client.node_history(node_id, "5m")).points


def _alive(pids: list[int]) -> list[int]:
    import psutil

    return [p for p in pids if psutil.pid_exists(p)]
