"""Fleet metrics: ``/metrics`` after requests through a real daemon (its real agent, the fake
runtime), the node and GPU figures from hand-written telemetry, and Prometheus' HTTP service
discovery (``/api/prometheus/targets``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.api.models import GpuEcc, GpuInfo
from daemon.api.models import HostSnapshot
from daemon.api.nodes import NodeView
from daemon.fleet_metrics.collector import THROTTLE_REASONS, FleetCollector
from daemon.fleet_metrics.discovery import PrometheusTargets
from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.serving import serving

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, metric: str, /, **labels: str) -> float | None:
    return found.get((metric, frozenset(labels.items())))


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as r:
        assert r.status == 200
        return samples(await r.text())


async def chat(session: aiohttp.ClientSession, v1: str, name: str, stream: bool = False) -> int:
    body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with session.post(f"{v1}/chat/completions", json=body) as r:
        await r.read()
        return r.status


async def test_metrics_count_each_models_requests_times_and_tokens(tmp_path: Path, fake_runtime: Path,
                                                                   model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        async with aiohttp.ClientSession() as session:
            assert [await chat(session, d.v1, "m"), await chat(session, d.v1, "m", stream=True)] == [200, 200]
            assert await chat(session, d.v1, "no-such-model") == 404
        records = await d.client.requests()
        found = await scrape(d.url)

    answered = [r for r in records if r.status == 200]
    assert len(answered) == 2
    assert value(found, "mirbadllm_router_requests_total", model="m", status="200") == 2
    for histogram in ("mirbadllm_router_ttft_seconds", "mirbadllm_router_request_seconds"):
        assert value(found, f"{histogram}_count", model="m") == 2
        assert value(found, f"{histogram}_bucket", model="m", le="+Inf") == 2
        assert (value(found, f"{histogram}_sum", model="m") or 0) > 0
    assert value(found, "mirbadllm_router_ttft_seconds_bucket", model="m", le="120.0") == 2
    assert value(found, "mirbadllm_router_request_seconds_bucket", model="m", le="600.0") == 2
    # the tokens the access log read from the answers, the streamed one's usage included
    assert value(found, "mirbadllm_router_completion_tokens_total", model="m") == sum(
        r.completion_tokens or 0 for r in answered) > 0
    assert value(found, "mirbadllm_router_prompt_tokens_total", model="m") == sum(
        r.prompt_tokens or 0 for r in answered) > 0
    assert not any("no-such-model" in dict(labels).get("model", "") for _name, labels in found)  # no request data


async def test_queue_depth_counts_requests_waiting_for_a_loading_model(tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", load_seconds=3, tokens=4)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("q", str(model_file), start_on_request=True))
        async with aiohttp.ClientSession() as session:
            waiting = [asyncio.ensure_future(chat(session, d.v1, "q")) for _ in range(2)]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while value(await scrape(d.url), "mirbadllm_router_queue_depth", model="q") != 2:
                assert loop.time() < deadline, "the two requests never showed as queued"
                await asyncio.sleep(0.05)
            assert await asyncio.gather(*waiting) == [200, 200]
        assert value(await scrape(d.url), "mirbadllm_router_queue_depth", model="q") == 0


async def test_the_local_nodes_figures_are_on_metrics(tmp_path: Path, fake_runtime: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while (found := await scrape(d.url)) and value(found, "mirbadllm_node_memory_total_bytes", node="local",
                                                       node_name=d.daemon.nodes.names()["local"]) is None:
            assert loop.time() < deadline, "no telemetry of the local node reached /metrics"
            await asyncio.sleep(0.1)
    labels = {"node": "local", "node_name": d.daemon.nodes.names()["local"]}
    assert value(found, "mirbadllm_node_online", **labels) == 1
    assert (value(found, "mirbadllm_node_memory_used_bytes", **labels) or 0) > 0
    assert value(found, "mirbadllm_node_cpu_percent", **labels) is not None


def test_node_and_gpu_figures_from_telemetry() -> None:
    h100 = GpuInfo(index=0, name="NVIDIA H100", uuid="GPU-a", memory_total=80 << 30, memory_used=20 << 30,
                   utilization_percent=93.0, temperature_c=71.0, power_w=612.5,
                   ecc=GpuEcc(volatile_corrected=3, volatile_uncorrected=0, aggregate_corrected=40),
                   throttle_reasons=["sw_power_cap"], xid_events=2, last_xid=79)
    consumer = GpuInfo(index=1, name="RTX 4090", uuid="GPU-b", memory_total=24 << 30, memory_used=1 << 30)
    hosts = [HostSnapshot(node="local", cpu_percent=12.5, memory_total=64 << 30, memory_used=16 << 30,
                          gpus=[h100, consumer]),
             HostSnapshot(node="n2", online=False, cpu_percent=99.0, memory_total=1, memory_used=1)]
    registry = CollectorRegistry()
    registry.register(FleetCollector(dict, lambda _id: None, lambda: hosts,
                                     lambda: {"local": "box", "n2": "rack-2"}))
    found = samples(generate_latest(registry).decode())

    box = {"node": "local", "node_name": "box"}
    assert value(found, "mirbadllm_node_online", **box) == 1
    assert value(found, "mirbadllm_node_cpu_percent", **box) == 12.5
    assert value(found, "mirbadllm_node_memory_used_bytes", **box) == 16 << 30
    assert value(found, "mirbadllm_node_memory_total_bytes", **box) == 64 << 30
    # an offline node: said to be offline, and no stale figures
    assert value(found, "mirbadllm_node_online", node="n2", node_name="rack-2") == 0
    assert value(found, "mirbadllm_node_cpu_percent", node="n2", node_name="rack-2") is None

    g0, g1 = {"node": "local", "gpu": "0"}, {"node": "local", "gpu": "1"}
    assert value(found, "mirbadllm_gpu_info", **g0, name="NVIDIA H100", uuid="GPU-a", unified_memory="0") == 1
    assert value(found, "mirbadllm_gpu_utilization_percent", **g0) == 93.0
    assert value(found, "mirbadllm_gpu_memory_used_bytes", **g0) == 20 << 30
    assert value(found, "mirbadllm_gpu_memory_total_bytes", **g1) == 24 << 30
    assert value(found, "mirbadllm_gpu_temperature_celsius", **g0) == 71.0
    assert value(found, "mirbadllm_gpu_power_watts", **g0) == 612.5
    assert value(found, "mirbadllm_gpu_ecc_errors_total", **g0, counter="volatile", type="corrected") == 3
    assert value(found, "mirbadllm_gpu_ecc_errors_total", **g0, counter="volatile", type="uncorrected") == 0
    assert value(found, "mirbadllm_gpu_ecc_errors_total", **g0, counter="aggregate", type="uncorrected") is None
    assert value(found, "mirbadllm_gpu_xid_errors_total", **g0) == 2
    assert value(found, "mirbadllm_gpu_last_xid", **g0) == 79
    assert value(found, "mirbadllm_gpu_throttle", **g0, reason="sw_power_cap") == 1
    assert all(value(found, "mirbadllm_gpu_throttle", **g0, reason=r) == 0 for r in THROTTLE_REASONS
               if r != "sw_power_cap")
    # the consumer card reports no ECC, throttle, XID or temperature: absent, not 0
    for name in ("mirbadllm_gpu_xid_errors_total", "mirbadllm_gpu_last_xid", "mirbadllm_gpu_temperature_celsius"):
        assert value(found, name, **g1) is None
    assert not any(n in ("mirbadllm_gpu_ecc_errors_total", "mirbadllm_gpu_throttle") and dict(labels)["gpu"] == "1"
                   for n, labels in found)


def test_unified_memory_and_its_working_set_limit_are_reported() -> None:
    apple = GpuInfo(index=0, name="Apple M3 Max", memory_total=64 << 30, memory_used=30 << 30, unified_memory=True,
                    working_set_limit=48 << 30)
    registry = CollectorRegistry()
    registry.register(FleetCollector(dict, lambda _id: None, lambda: [HostSnapshot(node="mac", gpus=[apple])],
                                     lambda: {"mac": "studio"}))
    found = samples(generate_latest(registry).decode())
    assert value(found, "mirbadllm_gpu_info", node="mac", gpu="0", name="Apple M3 Max", uuid="",
                 unified_memory="1") == 1
    assert value(found, "mirbadllm_gpu_working_set_limit_bytes", node="mac", gpu="0") == 48 << 30


@asynccontextmanager
async def serving_targets(handler: PrometheusTargets) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/api/prometheus/targets", handler.targets)
    async with serving(app) as url:
        yield url


async def test_service_discovery_lists_the_daemon_and_each_node() -> None:
    views = [NodeView(id="local", name="box", local=True),
             NodeView(id="f00d", name="rack-2", address="10.0.0.7:9443"),
             NodeView(id="beef", name="v6", address="[fd00::7]:9443")]
    async with serving_targets(PrometheusTargets(lambda: views)) as url, aiohttp.ClientSession() as session:
        async with session.get(f"{url}/api/prometheus/targets") as r:
            assert r.status == 200 and r.content_type == "application/json"
            groups = await r.json()
        async with session.get(f"{url}/api/prometheus/targets?node_exporter_port=9200") as r:
            moved = await r.json()
    port = url.rsplit(":", 1)[1]
    assert groups == [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"role": "daemon"}},
        {"targets": ["127.0.0.1:9100"], "labels": {"role": "node", "node": "local", "node_name": "box"}},
        {"targets": ["10.0.0.7:9100"], "labels": {"role": "node", "node": "f00d", "node_name": "rack-2"}},
        {"targets": ["[fd00::7]:9100"], "labels": {"role": "node", "node": "beef", "node_name": "v6"}},
    ]
    assert [g["targets"][0].rsplit(":", 1)[1] for g in moved[1:]] == ["9200"] * 3
    assert all(isinstance(g["targets"], list) and all(isinstance(v, str) for v in g["labels"].values())
               for g in groups)  # HTTP SD's shape: string labels only


async def test_service_discovery_needs_the_admin_token(tmp_path: Path, fake_runtime: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d, aiohttp.ClientSession() as session:
        async with session.get(f"{d.url}/api/prometheus/targets") as r:
            assert r.status == 401
            assert (await r.json())["error"]["code"] == "invalid_admin_token"
        headers = {"Authorization": f"Bearer {d.daemon.admin_token}"}
        async with session.get(f"{d.url}/api/prometheus/targets", headers=headers) as r:
            assert r.status == 200
            groups = json.loads(await r.text())
        async with session.get(f"{d.url}/api/prometheus/targets?node_exporter_port=99999", headers=headers) as r:
            assert r.status == 400
            assert (await r.json())["error"]["code"] == "invalid_parameter"
    assert groups[0] == {"targets": [f"127.0.0.1:{d.daemon.config.port}"], "labels": {"role": "daemon"}}
    assert groups[1]["labels"] == {"role": "node", "node": "local", "node_name": d.daemon.nodes.names()["local"]}
