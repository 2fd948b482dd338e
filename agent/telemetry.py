"""Telemetry: a sample every few seconds into a ring with sequence numbers.

Each sample holds the host's CPU and memory, the GPUs, and per instance its process memory and
CPU, its own GPU memory and utilisation (its PID in the GPUs' process lists), plus for ready
instances the figures their runtime's driver reads (``RuntimeDriver.scrape``: llama-server's
``/metrics`` and ``/slots``), token counters turned into per-second rates between two samples.
Blocking reads (psutil, NVML) run in an executor; a driver's HTTP reads have short timeouts so
one stuck runtime cannot stall the others.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent.api.models import GpuInfo, InstanceSample, TelemetryPage, TelemetrySample
from agent.gpu import GpuProbe
from agent.manager import InstanceManager
from agent.runtimes.driver import Figures
from agent.runtimes.run import RuntimeRun
from core.tasks import every

_LOGGER = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 2.0
RING_SAMPLES = 1800


def instance_gpu_figures(pid: int, gpus: list[GpuInfo]) -> tuple[int | None, float | None]:
    """One process's memory summed over the GPUs that list it, and its utilisation averaged over them."""
    memory: list[int] = []
    utilization: list[float] = []
    for gpu in gpus:
        for proc in gpu.processes:
            if proc.pid != pid:
                continue
            if proc.memory_used is not None:
                memory.append(proc.memory_used)
            if proc.utilization_percent is not None:
                utilization.append(proc.utilization_percent)
    return (sum(memory) if memory else None,
            sum(utilization) / len(utilization) if utilization else None)


def _rate(now: float | None, before: float | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0 or now < before:  # a reset restarts counting
        return None
    return (now - before) / seconds


@dataclass
class _Previous:
    pid: int
    ts: float
    prompt: float | None
    generated: float | None


@dataclass
class _Host:
    cpu_percent: float
    memory_total: int
    memory_available: int
    disk_total: int | None = None
    disk_free: int | None = None


class TelemetryCollector:
    """Samples the host and its instances into a ring; ``page(since)`` reads it."""

    def __init__(self, manager: InstanceManager, gpu_probe: GpuProbe,
                 interval_s: float = DEFAULT_INTERVAL_S, capacity: int = RING_SAMPLES,
                 models_dir: Path | None = None) -> None:
        self.manager = manager
        self.models_dir = models_dir  # its disk's free space goes in each sample (the fleet's alerts)
        self.gpu_probe = gpu_probe
        self.interval_s = interval_s
        self._ring: deque[TelemetrySample] = deque(maxlen=capacity)
        self._next_seq = 1
        self._processes: dict[tuple[int, float], psutil.Process] = {}
        self._previous: dict[str, _Previous] = {}

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def page(self, since: int = 0) -> TelemetryPage:
        """Samples with ``seq >= since``; all of them when ``since`` is ahead (the agent restarted)."""
        if since > self._next_seq:
            since = 0
        return TelemetryPage(next_seq=self._next_seq, samples=[s for s in self._ring if s.seq >= since])

    async def run(self) -> None:
        await every(lambda: self.interval_s, self.collect, "telemetry sample")

    async def collect(self) -> TelemetrySample:
        runs = self.manager.runs()
        loop = asyncio.get_running_loop()
        (host, instances), gpus = await asyncio.gather(
            loop.run_in_executor(None, self._host_sample, runs),
            loop.run_in_executor(None, self.gpu_probe.sample))
        ready = self.manager.ready_runs()
        scraped = await asyncio.gather(*(self._scrape(run) for run in ready.values()))
        ts = time.time()
        for instance_id, figures in zip(ready, scraped, strict=True):
            instances.setdefault(instance_id, InstanceSample())
            self._fill(instance_id, ready[instance_id], instances[instance_id], figures, ts)
        for instance_id, run in runs.items():
            if instance_id in instances:
                memory, utilization = instance_gpu_figures(run.pid, gpus)
                instances[instance_id].gpu_memory_bytes = memory
                instances[instance_id].gpu_utilization_percent = utilization
        sample = TelemetrySample(seq=self._next_seq, ts=ts, gpus=list(gpus), instances=instances,
                                 cpu_percent=host.cpu_percent, memory_total=host.memory_total,
                                 memory_used=host.memory_total - host.memory_available,
                                 memory_available=host.memory_available, disk_total=host.disk_total,
                                 disk_free=host.disk_free)
        self._next_seq += 1
        self._ring.append(sample)
        return sample

    def _host_sample(self, runs: dict[str, RuntimeRun]) -> tuple[_Host, dict[str, InstanceSample]]:
        memory = psutil.virtual_memory()
        instances: dict[str, InstanceSample] = {}
        alive: set[tuple[int, float]] = set()
        for instance_id, run in runs.items():
            key = (run.pid, run.process.create_time)
            alive.add(key)
            try:
                proc = self._processes.get(key) or run.process.psutil_handle()
                if proc is None:
                    continue
                self._processes[key] = proc
                instances[instance_id] = InstanceSample(rss_bytes=proc.memory_info().rss,
                                                        cpu_percent=proc.cpu_percent(None))
            except psutil.Error:
                continue
        for key in set(self._processes) - alive:
            del self._processes[key]
        disk = _disk(self.models_dir)
        return _Host(psutil.cpu_percent(None), memory.total, memory.available,
                     disk.total if disk else None, disk.free if disk else None), instances

    async def _scrape(self, run: RuntimeRun) -> Figures:
        return await self.manager.driver_for(run).scrape(run, self.manager.session())

    def _fill(self, instance_id: str, run: RuntimeRun, sample: InstanceSample,
              figures: Figures, ts: float) -> None:
        for field, value in figures.items():
            setattr(sample, field, value)
        before = self._previous.get(instance_id)
        if before is not None and before.pid == run.pid:
            seconds = ts - before.ts
            sample.prompt_tokens_per_s = _rate(sample.prompt_tokens_total, before.prompt, seconds)
            sample.generation_tokens_per_s = _rate(sample.generation_tokens_total, before.generated, seconds)
        self._previous[instance_id] = _Previous(run.pid, ts, sample.prompt_tokens_total,
                                                sample.generation_tokens_total)


def gpu_summary(gpus: list[GpuInfo]) -> str:
    """'2 GPUs, 48.0 GiB' for log lines."""
    total = sum(g.memory_total for g in gpus) / 2**30
    return f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}, {total:.1f} GiB"


def _disk(folder: Path | None) -> shutil._ntuple_diskusage | None:
    if folder is None:
        return None
    try:
        return shutil.disk_usage(folder)
    except OSError:
        return None
