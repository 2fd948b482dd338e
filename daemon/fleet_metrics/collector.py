"""The fleet on ``/metrics``: each model's queue, each node's CPU and memory, each GPU's figures.

Read when Prometheus scrapes (a ``prometheus_client`` collector on ``RouterMetrics``' registry),
from what the daemon already holds: the router's gates and the latest telemetry sample of every
node (``daemon.telemetry.TelemetryCollector``). Nothing is recorded per request. Labels are
bounded: model served names, node ids and names, GPU indexes, and fixed words (throttle reasons,
ECC counter kinds). A node that does not answer now reports ``mirbadllm_node_online 0`` and no
stale figures; a figure a GPU does not report is absent, never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.api.models import GpuInfo
from daemon.api.models import HostSnapshot, ModelDefinition

# every name agent.gpu.THROTTLE_REASONS decodes (agent.gpu is the agent's, not the daemon's, to import)
THROTTLE_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                    "display_clock_setting", "board_limit", "reliability")
_ECC = (("volatile", "corrected"), ("volatile", "uncorrected"), ("aggregate", "corrected"),
        ("aggregate", "uncorrected"))


class FleetCollector(Collector):
    def __init__(self, waiting: Callable[[], dict[str, int]], model: Callable[[str], ModelDefinition | None],
                 hosts: Callable[[], list[HostSnapshot]], node_names: Callable[[], dict[str, str]]) -> None:
        """``waiting``: requests queued per model id (``Gates.waiting``); ``model``: a model id's
        definition, None once removed (``Registry.get``); ``hosts``: each node's latest figures
        (``TelemetryCollector.hosts``); ``node_names``: node id -> name (``NodeManager.names``)."""
        self._waiting = waiting
        self._model = model
        self._hosts = hosts
        self._node_names = node_names

    def collect(self) -> Iterable[Metric]:
        queue = GaugeMetricFamily("mirbadllm_router_queue_depth", "Requests waiting in the daemon's queue "
                                  "for a model (loading, or all its slots taken)", labels=["model"])
        for model_id, waiting in sorted(self._waiting().items()):
            definition = self._model(model_id)
            if definition is not None:
                queue.add_metric([definition.served_name], waiting)
        yield queue
        yield from _fleet(self._hosts(), self._node_names())


def _fleet(hosts: list[HostSnapshot], names: dict[str, str]) -> Iterator[Metric]:
    node = ["node", "node_name"]
    gpu = ["node", "gpu"]
    online = GaugeMetricFamily("mirbadllm_node_online", "1 while the node's agent answers", labels=node)
    cpu = GaugeMetricFamily("mirbadllm_node_cpu_percent", "The node's CPU use", labels=node)
    mem_used = GaugeMetricFamily("mirbadllm_node_memory_used_bytes", "The node's memory in use", labels=node)
    mem_total = GaugeMetricFamily("mirbadllm_node_memory_total_bytes", "The node's memory", labels=node)
    info = GaugeMetricFamily("mirbadllm_gpu_info", "1 per GPU, with its name and UUID",
                             labels=[*gpu, "name", "uuid", "unified_memory"])
    util = GaugeMetricFamily("mirbadllm_gpu_utilization_percent", "GPU utilisation", labels=gpu)
    g_used = GaugeMetricFamily("mirbadllm_gpu_memory_used_bytes", "GPU memory in use", labels=gpu)
    g_total = GaugeMetricFamily("mirbadllm_gpu_memory_total_bytes", "GPU memory", labels=gpu)
    limit = GaugeMetricFamily("mirbadllm_gpu_working_set_limit_bytes", "Apple silicon: Metal's recommended "
                              "working set", labels=gpu)
    temp = GaugeMetricFamily("mirbadllm_gpu_temperature_celsius", "GPU temperature", labels=gpu)
    power = GaugeMetricFamily("mirbadllm_gpu_power_watts", "GPU power draw", labels=gpu)
    ecc = CounterMetricFamily("mirbadllm_gpu_ecc_errors", "ECC errors: volatile since the driver loaded, "
                              "aggregate over the GPU's life", labels=[*gpu, "counter", "type"])
    xid = CounterMetricFamily("mirbadllm_gpu_xid_errors", "XID errors since the node's agent started",
                              labels=gpu)
    last_xid = GaugeMetricFamily("mirbadllm_gpu_last_xid", "The code of the newest XID error", labels=gpu)
    throttle = GaugeMetricFamily("mirbadllm_gpu_throttle", "1 while this reason holds the GPU's clocks down",
                                 labels=[*gpu, "reason"])
    for host in hosts:
        labels = [host.node, names.get(host.node, host.node)]
        online.add_metric(labels, 1 if host.online else 0)
        if not host.online:
            continue
        _add(cpu, labels, host.cpu_percent)
        _add(mem_used, labels, host.memory_used)
        _add(mem_total, labels, host.memory_total)
        for g in host.gpus:
            at = [host.node, str(g.index)]
            info.add_metric([*at, g.name, g.uuid, "1" if g.unified_memory else "0"], 1)
            _gpu(g, at, util, g_used, g_total, limit, temp, power)
            if g.ecc is not None:
                counts = g.ecc.model_dump()
                for counter, kind in _ECC:
                    _add(ecc, [*at, counter, kind], counts[f"{counter}_{kind}"])
            _add(xid, at, g.xid_events)
            _add(last_xid, at, g.last_xid)
            if g.throttle_reasons is not None:
                for reason in (*THROTTLE_REASONS, *(r for r in g.throttle_reasons if r not in THROTTLE_REASONS)):
                    throttle.add_metric([*at, reason], 1 if reason in g.throttle_reasons else 0)
    yield from (online, cpu, mem_used, mem_total, info, util, g_used, g_total, limit, temp, power, ecc, xid,
                last_xid, throttle)


def _gpu(g: GpuInfo, at: list[str], util: GaugeMetricFamily, used: GaugeMetricFamily, total: GaugeMetricFamily,
         limit: GaugeMetricFamily, temp: GaugeMetricFamily, power: GaugeMetricFamily) -> None:
    _add(util, at, g.utilization_percent)
    _add(used, at, g.memory_used)
    _add(total, at, g.memory_total)
    _add(limit, at, g.working_set_limit)
    _add(temp, at, g.temperature_c)
    _add(power, at, g.power_w)


def _add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)
