"""Pure parts of the node registry: addresses, nodes.json, mDNS records, and the monitor's verdicts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.models import AgentStatus, InstanceInfo, InstancesPage, InstanceState
from daemon.api.nodes import NodeState
from daemon.events import EventBus
from daemon.nodes.discovery import entry_from_service
from daemon.nodes.links import Links, NodeLink
from daemon.nodes.monitor import NodeMonitor, NodePolicy
from daemon.nodes.store import NodeRecord, NodeStore, parse_address
from tests.fleet.agents import eventually

FP = "0123456789abcdef" * 4


def test_addresses_read_every_way_a_person_writes_them() -> None:
    assert parse_address("10.0.0.5") == ("10.0.0.5", 9443)
    assert parse_address(" gpu-box.local:9555 ") == ("gpu-box.local", 9555)
    assert parse_address("https://10.0.0.5:9443/") == ("10.0.0.5", 9443)
    assert parse_address("[fd00::2]:9000") == ("fd00::2", 9000)
    assert parse_address("fd00::2") == ("fd00::2", 9443)
    for bad in ("", "host:0", "host:99999", "host:abc", "[fd00::2", "a/b", "user@host"):
        with pytest.raises(ValueError):
            parse_address(bad)


async def test_nodes_json_round_trips_and_a_broken_file_is_kept_aside(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "nodes.json")
    record = NodeRecord(id=FP, name="box", host="10.0.0.5", port=9443, certificate_pem="PEM", paired_at=1.0)
    await store.put(record)
    assert (tmp_path / "nodes.json").stat().st_mode & 0o777 == 0o600
    again = NodeStore(tmp_path / "nodes.json")
    again.load()
    assert again.all() == [record] and again.get(FP).address == "10.0.0.5:9443"  # type: ignore[union-attr]
    assert await again.remove(FP) == record and json.loads((tmp_path / "nodes.json").read_text())["nodes"] == []
    (tmp_path / "nodes.json").write_text("{not json")
    broken = NodeStore(tmp_path / "nodes.json")
    broken.load()
    assert broken.all() == [] and (tmp_path / "nodes.json.invalid").exists()


def test_an_mdns_record_becomes_a_discovered_entry_only_when_it_is_an_unpaired_agent() -> None:
    props = {b"name": b"gpu box", b"fp": FP.encode(), b"version": b"0.1.0", b"state": b"unpaired"}
    entry = entry_from_service("gpu box 01234567._mirbadllm._tcp.local.", ["10.0.0.5"], 9443, props, 5.0)
    assert entry is not None
    assert (entry.name, entry.address, entry.short_fingerprint, entry.source) == \
        ("gpu box", "10.0.0.5:9443", "0123-4567-89AB-CDEF-0123", "mdns")
    assert entry_from_service("x", ["10.0.0.5"], 9443, {**props, b"fp": b"short"}, 5.0) is None
    assert entry_from_service("x", ["10.0.0.5"], 9443, {**props, b"state": b"paired"}, 5.0) is None
    assert entry_from_service("x", [], 9443, props, 5.0) is None


class FakeAgentClient:
    """Answers status as told; the instance long-poll answers once, then waits like the real one."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.delay = 0.0
        self.changed = asyncio.Event()

    async def status(self) -> AgentStatus:
        await asyncio.sleep(self.delay)
        if self.mode == "fail":
            raise AgentError(0, "unreachable", "connection refused")
        return AgentStatus(node_id=FP, hostname="box", os="Linux", arch="x86_64", version="t", cpu_count=4,
                           memory_total=8 << 30, memory_available=6 << 30)

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        if since not in (None, -1):
            await self.changed.wait()
        info = InstanceInfo(instance_id="m", state=InstanceState.READY, pid=4242)
        return InstancesPage(version=1, instances=[info])


async def test_the_monitor_degrades_then_takes_offline_then_resumes_the_link() -> None:
    events = EventBus()
    client = FakeAgentClient()
    reports: list[dict[str, Any]] = []
    link = NodeLink(FP, client, lambda _n, inst: reports.append(dict(inst)))  # type: ignore[arg-type]
    links = Links()
    links.add(link)
    monitor = NodeMonitor(links, NodePolicy(offline_after=3, slow_ms=200), events)
    link.start()
    await eventually(lambda: link.online, what="the first instance report")
    assert (await monitor.check(FP, link)).state == NodeState.ONLINE

    client.mode = "fail"
    assert (await monitor.check(FP, link)).state == NodeState.DEGRADED
    assert link.online and link.instances  # one miss is not an outage
    await monitor.check(FP, link)
    health = await monitor.check(FP, link)
    assert health.state == NodeState.OFFLINE and "3 status probes missed" in (health.reason or "")
    assert not link.online and link.instances == {} and not link.running and reports[-1] == {}

    client.mode = "ok"
    assert (await monitor.check(FP, link)).state == NodeState.DEGRADED  # back, instances on their way
    await eventually(lambda: link.online and link.instances["m"].pid == 4242, what="the instances again")
    assert (await monitor.check(FP, link)).state == NodeState.ONLINE
    client.delay = 0.3
    health = await monitor.check(FP, link)
    assert health.state == NodeState.DEGRADED and "slow" in (health.reason or "")
    states = [(e.data["previous"], e.data["state"]) for e in events._page(0).events]
    assert states == [("unknown", "online"), ("online", "degraded"), ("degraded", "offline"),
                      ("offline", "degraded"), ("degraded", "online"), ("online", "degraded")]
    await link.stop()


def test_the_documented_offline_bound_follows_the_policy() -> None:
    assert NodePolicy().offline_within_s == 12.0
    assert NodePolicy(interval_s=0.5, probe_timeout_s=1.0, offline_after=3).offline_within_s == 4.5


async def test_a_node_whose_stored_certificate_cannot_be_read_is_offline_and_the_daemon_serves(
        tmp_path: Path) -> None:
    """A damaged record in nodes.json once stopped the daemon at start (the certificate's parse error)."""
    from daemon.api.client import DaemonClient
    from daemon.config import DaemonConfig
    from daemon.deps import build_deps
    from daemon.paths import DaemonPaths
    from daemon.server import start_server

    paths = DaemonPaths(tmp_path / "home")
    await NodeStore(paths.nodes).put(NodeRecord(id=FP, name="box", host="10.0.0.5", port=9443,
                                                certificate_pem="-----BEGIN CERTIFICATE-----\ncut short"))
    daemon = build_deps(DaemonConfig(port=0, ollama_port=None, local_agent=False, seed_demo_model=False,
                                     nodes=NodePolicy(discovery=False)), paths)
    runner = await start_server(daemon)
    client = DaemonClient(f"http://127.0.0.1:{daemon.config.port}", daemon.admin_token)
    try:
        [node] = await client.list_nodes()
        assert (node.name, node.state) == ("box", NodeState.OFFLINE)
        assert "cannot be read" in (node.reason or "") and "pair it again" in (node.reason or "")
    finally:
        await client.close()
        await runner.cleanup()
