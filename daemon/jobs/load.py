"""Quiet before measuring: drain the model's requests, and flag load that would skew the figures.

A job never refuses to run on a busy machine: it measures and says why the figures may be noisy
(requests still in flight when it started, other models serving, CPU or GPU busy outside
MirbadLLM), from the router's in-flight counts and the agent's telemetry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from agent.api.models import TelemetrySample

CPU_OUTSIDE_LIMIT = 25.0  # % of the whole machine
GPU_BUSY_LIMIT = 10.0  # % utilisation with none of our runtimes working
FRESH_SAMPLE_WAIT_S = 5.0
POLL_S = 0.1

SampleSource = Callable[[], TelemetrySample | None]


def _busy(sample: TelemetrySample, instance_id: str) -> bool:
    inst = sample.instances.get(instance_id)
    return inst is not None and ((inst.requests_processing or 0) > 0 or (inst.slots_busy or 0) > 0)


def other_models_busy(sample: TelemetrySample, own: set[str]) -> list[str]:
    busy = sorted(i for i in sample.instances if i not in own and _busy(sample, i))
    return [f"noisy: other models busy ({', '.join(busy)})"] if busy else []


def outside_load(sample: TelemetrySample, cpu_count: int) -> list[str]:
    """CPU and GPU use that is not our runtimes', measured while ours are idle."""
    reasons = []
    ours = sum(inst.cpu_percent or 0.0 for inst in sample.instances.values()) / max(1, cpu_count)
    outside = sample.cpu_percent - ours
    if outside > CPU_OUTSIDE_LIMIT:
        reasons.append(f"noisy: CPU {outside:.0f} % busy with work outside MirbadLLM")
    anyone_busy = any(_busy(sample, i) for i in sample.instances)
    hot = [g for g in sample.gpus if (g.utilization_percent or 0) > GPU_BUSY_LIMIT]
    if hot and not anyone_busy:
        reasons.append(f"noisy: GPU {hot[0].index} {hot[0].utilization_percent:.0f} % busy with work outside MirbadLLM")
    return reasons


async def drain(in_flight: Callable[[], int], latest: SampleSource, instance_id: str, timeout_s: float) -> bool:
    """Wait until the model has no request in flight (router and a fresh telemetry sample agree).

    False when ``timeout_s`` passed first; the caller then flags the run as noisy.
    """
    started = time.time()
    deadline = time.monotonic() + timeout_s
    idle_since: float | None = None
    while True:
        if in_flight() == 0:
            idle_since = idle_since or time.monotonic()
            sample = latest()
            fresh = sample is not None and sample.ts >= started
            if fresh and sample is not None and not _busy(sample, instance_id):
                return True
            if time.monotonic() - idle_since >= FRESH_SAMPLE_WAIT_S:
                return True  # no telemetry to say otherwise: the router's count stands
        else:
            idle_since = None
        if time.monotonic() >= deadline:
            return in_flight() == 0
        await asyncio.sleep(POLL_S)
