"""A node on its own wire: an agent in a network namespace with its own address, reached over a veth.

Cutting the wire takes the node offline and its model answers 503 with the reason within the
monitor's documented bound; restoring it brings the node back and the same runtime (same PID)
serving again. mDNS discovery runs across the same wire, and nowhere else.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.api.models import ModelState
from daemon.api.nodes import NodeState
from daemon.nodes.monitor import NodePolicy
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fleet.agents import eventually

pytestmark = [pytest.mark.netns, pytest.mark.slow]

MONITOR = {"interval_s": 0.25, "probe_timeout_s": 1.0, "offline_after": 3}  # offline within 3 × 1.25 s
SLACK_S = 6.0  # two busy cores: scheduling, not the design, may add this much


async def chat(rd: RunningDaemon, served: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    body = {"model": served, "messages": [{"role": "user", "content": "hi"}]}
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(timeout=timeout) as session, \
            session.post(f"{rd.v1}/chat/completions", json=body) as resp:
        return resp.status, json.loads(await resp.text()), dict(resp.headers)


async def test_a_cut_link_makes_the_node_offline_and_back_with_the_same_runtime(
        netns: Any, agents: Any, tmp_path: Path, model_file: Path) -> None:
    ns = netns()
    agent = await agents("remote", host=ns.ns_ip, port=9443, netns=ns.name)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=MONITOR) as rd:
        pairing = agent.last("pairing")
        node = await rd.client.pair_node(f"{ns.ns_ip}:9443", pairing["code"], pairing["fingerprint"])
        assert node.address == f"{ns.ns_ip}:9443"
        await rd.client.create_model(model("far", str(model_file), node=node.id))
        ready = await rd.client.start_model("far", wait=True)
        assert ready.state == ModelState.READY, ready.error
        assert (await chat(rd, "far"))[0] == 200

        ns.cut()
        cut_at = time.monotonic()
        bound = NodePolicy.model_validate(MONITOR).offline_within_s
        await eventually(lambda: _state_is(rd, "far", ModelState.STOPPED), timeout=bound + 30,
                         interval=0.1, what="the model to stop answering as ready")
        took = time.monotonic() - cut_at
        assert took <= bound + SLACK_S, f"offline after {took:.1f} s; documented {bound:.1f} s"
        status, body, headers = await chat(rd, "far")
        assert status == 503 and headers.get("Retry-After")
        assert "offline" in body["error"]["message"] and "missed" in body["error"]["message"]
        view = await rd.client.get_node(node.id)
        assert view.state == NodeState.OFFLINE and "missed" in (view.reason or "")
        states = [e.data["state"] for e in (await rd.client.events(0, timeout=0)).events if e.type == "node.state"]
        assert "offline" in states

        ns.restore()
        back = await eventually(lambda: _state_is(rd, "far", ModelState.READY), timeout=60,
                                what="the model to be ready again")
        assert back.pid == ready.pid  # adopted as it ran all along, not restarted
        assert (await chat(rd, "far"))[0] == 200
        await eventually(lambda: _node_state_is(rd, node.id, NodeState.ONLINE), what="the node online again")


async def test_mdns_discovery_across_the_wire(netns: Any, agents: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ns = netns()
    on = {"MIRBADLLM_NO_MDNS": "0"}  # opted in, on the namespace's interfaces only
    agent = await agents("seen-on-lan", host=ns.ns_ip, port=9443, netns=ns.name,
                         extra=["--mdns-interface", ns.ns_ip], env=on)
    monkeypatch.setenv("MIRBADLLM_NO_MDNS", "0")
    nodes = {**MONITOR, "discovery": True, "mdns_interfaces": [ns.host_ip]}
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=nodes) as rd:
        entry = await eventually(lambda: _discovered(rd, agent.fingerprint), timeout=30, what="the mDNS entry")
        assert (entry.name, entry.address, entry.source) == ("seen-on-lan", f"{ns.ns_ip}:9443", "mdns")
        assert entry.short_fingerprint.replace("-", "").lower() == agent.fingerprint[:20]
        node = await rd.client.pair_node(entry.address, agent.code, entry.fingerprint)
        assert node.name == "seen-on-lan"
        # Paired: it stops advertising, and the list forgets it.
        await eventually(lambda: _not_discovered(rd), timeout=30, what="the entry to go")


async def _state_is(rd: RunningDaemon, model_id: str, state: ModelState):  # type: ignore[no-untyped-def]
    status = (await rd.client.get_model(model_id)).status
    return status if status.state == state else None


async def _node_state_is(rd: RunningDaemon, node_id: str, state: NodeState) -> bool:
    return (await rd.client.get_node(node_id)).state == state


async def _discovered(rd: RunningDaemon, fingerprint: str):  # type: ignore[no-untyped-def]
    return next((d for d in await rd.client.discovered_nodes() if d.fingerprint == fingerprint), None)


async def _not_discovered(rd: RunningDaemon) -> bool:
    return await rd.client.discovered_nodes() == []
