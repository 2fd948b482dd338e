"""Pairing through the daemon's admin API: wrong codes, a reused code, a wrong fingerprint, and the
code nowhere in the daemon's logs, files, audit trail or events."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent.api.models import GpuInfo
from agent.api.pairing import normalize_code
from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from daemon.api.nodes import NodeState
from tests.daemon.harness import RunningDaemon, model
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, start_inprocess_agent

GPU = GpuInfo(index=0, name="Fake RTX 4090", uuid="GPU-fleet-0", memory_total=24 << 30, memory_used=2 << 30,
              utilization_percent=41.0, temperature_c=55.0, power_w=120.0)


@pytest.fixture
async def agent(tmp_path: Path, runtime_exe: Path) -> AsyncIterator[InProcessAgent]:
    started = await start_inprocess_agent(tmp_path / "agent", name="zeta", llama_server=runtime_exe, gpus=[GPU])
    yield started
    await started.close()


def wrong_variant(code: str) -> str:
    plain = normalize_code(code)
    return plain[:-1] + ("A" if plain[-1] != "A" else "B")


async def test_wrong_codes_then_a_new_code_then_pairing_and_the_code_is_never_kept(
        agent: InProcessAgent, rd: RunningDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    address = f"127.0.0.1:{agent.lifecycle.port}"
    first = agent.last("pairing")
    codes = [first["code"]]
    with pytest.raises(DaemonError) as malformed:
        await rd.client.pair_node(address, "ABC", first["fingerprint"])
    assert (malformed.value.status, malformed.value.code) == (422, "invalid_code")

    for n in range(1, 6):
        with pytest.raises(DaemonError) as wrong:
            await rd.client.pair_node(address, wrong_variant(first["code"]), first["fingerprint"])
        assert (wrong.value.status, wrong.value.code) == (403, "wrong_code")
        assert ("new code" in wrong.value.message) == (n == 5)
    second = await agent.wait_event("pairing", after=agent.events.index(first) + 1)
    codes.append(second["code"])
    assert second["code"] != first["code"] and second["fingerprint"] == first["fingerprint"]
    with pytest.raises(DaemonError) as retired:
        await rd.client.pair_node(address, first["code"], first["fingerprint"])
    assert retired.value.code == "wrong_code"

    with pytest.raises(DaemonError) as mismatch:  # the user compared another agent's fingerprint
        await rd.client.pair_node(address, second["code"], "ab" * 32)
    assert (mismatch.value.status, mismatch.value.code) == (409, "fingerprint_mismatch")

    node = await rd.client.pair_node(address, second["code"].lower(), first["fingerprint"])
    assert node.name == "zeta" and node.fingerprint == first["fingerprint"] and not node.local
    with pytest.raises(DaemonError) as reused:  # one use: the pairing endpoint is closed now
        await rd.client.pair_node(address, second["code"], first["fingerprint"])
    assert reused.value.status in (409, 502)

    events = (await rd.client.events(0, timeout=0)).events
    assert [e.type for e in events if e.type == "node.paired"] == ["node.paired"]
    await rd.daemon.history.flush()
    with sqlite3.connect(rd.daemon.paths.history) as db:
        audit = " ".join(" ".join(map(str, row)) for row in db.execute("SELECT * FROM audit"))
    kept = [caplog.text, audit, repr([e.model_dump() for e in events])]
    kept += [p.read_text(errors="replace") for p in rd.daemon.paths.home.rglob("*")
             if p.is_file() and p.suffix != ".sqlite"]
    for code in codes:
        for form in (code, normalize_code(code), code.lower()):
            assert all(form not in text for text in kept), f"the pairing code {form} was kept somewhere"


async def test_a_paired_node_reports_telemetry_per_gpu_and_runs_models(
        agent: InProcessAgent, rd: RunningDaemon, model_file: Path) -> None:
    added = await rd.client.add_node_address(f"127.0.0.1:{agent.lifecycle.port}")
    assert added.discovered is not None and added.discovered.source == "manual"
    entry = added.discovered
    assert entry.short_fingerprint == entry.fingerprint[:4].upper() + "-" + entry.fingerprint[4:8].upper() \
        + entry.short_fingerprint[9:]
    node = await rd.client.pair_node(entry.address, agent.last("pairing")["code"], entry.fingerprint)
    again = await rd.client.add_node_address(entry.address)  # the same node, known: no new entry
    assert again.node is not None and again.node.id == node.id and again.discovered is None

    view = await eventually(lambda: _with_gpus(rd, node.id), what="the node's GPUs")
    assert view.state == NodeState.ONLINE and view.gpus[0].uuid == "GPU-fleet-0"
    series = await eventually(lambda: _gpu_points(rd, node.id), what="GPU history")
    assert series[-1].values == {"mem_used_bytes": 2 << 30, "mem_total_bytes": 24 << 30, "util_percent": 41.0,
                                 "temperature_c": 55.0, "power_w": 120.0}
    with pytest.raises(DaemonError) as no_gpu:
        await rd.client.gpu_history(node.id, "GPU-nope")
    assert no_gpu.value.status == 404

    await rd.client.create_model(model("gpu-model", str(model_file), node=node.id))
    status = await rd.client.start_model("gpu-model", wait=True)
    assert status.state == ModelState.READY and status.node == node.id
    assert (await rd.client.get_node(node.id)).models == ["gpu-model"]
    await rd.client.remove_node(node.id)
    assert (await rd.client.get_model("gpu-model")).status.state == ModelState.STOPPED
    with pytest.raises(DaemonError) as gone:
        await rd.client.get_node(node.id)
    assert gone.value.status == 404
    await agent.wait_event("unpaired")


async def _with_gpus(rd: RunningDaemon, node_id: str):  # type: ignore[no-untyped-def]
    view = await rd.client.get_node(node_id)
    return view if view.gpus and view.state == NodeState.ONLINE else None


async def _gpu_points(rd: RunningDaemon, node_id: str):  # type: ignore[no-untyped-def]
    return (await rd.client.gpu_history(node_id, "GPU-fleet-0", "5m")).points


async def test_a_remote_runtime_that_hangs_up_on_reused_connections_still_answers(
        tmp_path: Path, rd: RunningDaemon, model_file: Path, fake_runtime: Any) -> None:
    """The agent's proxy retries once on a fresh connection, as the daemon's router does locally."""
    exe = fake_runtime(drop_reused=True)
    agent = await start_inprocess_agent(tmp_path / "dropping", name="theta", llama_server=exe)
    try:
        pairing = agent.last("pairing")
        node = await rd.client.pair_node(f"127.0.0.1:{agent.lifecycle.port}", pairing["code"], pairing["fingerprint"])
        await rd.client.create_model(model("dropper", str(model_file), node=node.id))
        assert (await rd.client.start_model("dropper", wait=True)).state == ModelState.READY
        body = {"model": "dropper", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as session:
            for _ in range(3):  # each after the first arrives on a connection the runtime drops
                async with session.post(f"{rd.v1}/chat/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
    finally:
        await agent.close()
