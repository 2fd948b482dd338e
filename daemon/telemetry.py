"""Pulls each agent's telemetry ring into the history database and keeps the latest host figures."""

from __future__ import annotations

import logging

from agent.api.client import AgentError
from agent.api.models import GpuInfo, TelemetrySample
from core.tasks import every
from daemon.api.models import HostSnapshot
from daemon.history import History
from daemon.nodes.links import Links

_LOGGER = logging.getLogger(__name__)


def model_row(sample: TelemetrySample, instance_id: str) -> dict[str, float | None]:
    inst = sample.instances[instance_id]
    return {
        "gen_tps": inst.generation_tokens_per_s, "prompt_tps": inst.prompt_tokens_per_s,
        "requests_running": inst.requests_processing if inst.requests_processing is not None else inst.slots_busy,
        "requests_waiting": inst.requests_deferred, "kv_cache_ratio": inst.kv_cache_usage_ratio,
        "rss_bytes": inst.rss_bytes, "cpu_percent": inst.cpu_percent,
        "gpu_mem_bytes": inst.gpu_memory_bytes, "gpu_util_percent": inst.gpu_utilization_percent,
    }


def node_row(sample: TelemetrySample) -> dict[str, float | None]:
    gpus = sample.gpus
    return {
        "cpu_percent": sample.cpu_percent, "mem_used_bytes": sample.memory_used,
        "mem_total_bytes": sample.memory_total,
        "gpu_mem_used_bytes": sum(g.memory_used for g in gpus) if gpus else None,
        "gpu_mem_total_bytes": sum(g.memory_total for g in gpus) if gpus else None,
        "gpu_util_percent": (sum(g.utilization_percent or 0 for g in gpus) / len(gpus)) if gpus else None,
    }


def gpu_subject(node_id: str, gpu: GpuInfo) -> str:
    """The history subject of one GPU: its node and its UUID (its index when it reports none)."""
    return f"{node_id}/{gpu.uuid or gpu.index}"


def gpu_rows(node_id: str, sample: TelemetrySample) -> dict[str, dict[str, float | None]]:
    return {gpu_subject(node_id, g): {
        "mem_used_bytes": g.memory_used, "mem_total_bytes": g.memory_total,
        "util_percent": g.utilization_percent, "temperature_c": g.temperature_c, "power_w": g.power_w,
    } for g in sample.gpus}


class TelemetryCollector:
    def __init__(self, links: Links, history: History, interval_s: float) -> None:
        self._links = links
        self._history = history
        self._interval = interval_s
        self._next_seq: dict[str, int] = {}
        self.latest: dict[str, TelemetrySample] = {}

    def hosts(self) -> list[HostSnapshot]:
        out = []
        for link in self._links:
            node_id = link.node_id
            sample = self.latest.get(node_id)
            out.append(HostSnapshot(
                node=node_id, online=link.online,
                cpu_percent=sample.cpu_percent if sample else None,
                memory_total=sample.memory_total if sample else None,
                memory_used=sample.memory_used if sample else None,
                gpus=sample.gpus if sample else [],
                disk_total=sample.disk_total if sample else None, disk_free=sample.disk_free if sample else None))
        return out

    async def collect_once(self) -> None:
        for link in self._links:
            node_id = link.node_id
            if not link.online:
                continue
            try:
                page = await link.client.telemetry(since=self._next_seq.get(node_id, 0))
            except AgentError as exc:
                _LOGGER.debug("telemetry from %s failed: %s", node_id, exc)
                continue
            if page.next_seq < self._next_seq.get(node_id, 0):  # the agent restarted
                self._next_seq[node_id] = 0
            self._next_seq[node_id] = page.next_seq
            for sample in page.samples:
                await self._history.add_samples("node", sample.ts, {node_id: node_row(sample)})
                await self._history.add_samples("gpu", sample.ts, gpu_rows(node_id, sample))
                rows = {iid: model_row(sample, iid) for iid in sample.instances}
                await self._history.add_samples("model", sample.ts, rows)
                self.latest[node_id] = sample
                link.latest_sample = sample

    async def run(self) -> None:
        await every(lambda: self._interval, self.collect_once, "telemetry collection")
