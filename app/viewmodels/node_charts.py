"""Charts of one node (CPU, memory, GPU memory and load) and of one of its GPUs (temperature, power),
over 5 min / 1 h / 24 h / 7 d, from ``DaemonApi.node_history`` and ``gpu_history``: the shared
``HistoryCharts`` with a node (and maybe one GPU) as its subject and two chart groups."""

from __future__ import annotations

from typing import NamedTuple

from app.viewmodels.charts import ChartSpec, ChartsState, HistoryCharts
from daemon.api.models import HistoryRange, HistorySeries

NODE_CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("CPU", "%", (("cpu_percent", "Busy"),)),
    ChartSpec("Memory", "bytes", (("mem_used_bytes", "Used"), ("mem_total_bytes", "Total"))),
    ChartSpec("GPU memory", "bytes", (("gpu_mem_used_bytes", "Used"), ("gpu_mem_total_bytes", "Total")),
              needs_gpu=True),
    ChartSpec("GPU utilisation", "%", (("gpu_util_percent", "Busy"),), needs_gpu=True),
)
GPU_CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("GPU temperature", "°C", (("temperature_c", "Temperature"),)),
    ChartSpec("GPU power", "W", (("power_w", "Draw"),)),
)
NODE, GPU = 0, 1  # the chart groups: the node's plot, the chosen GPU's plot


class NodeSubject(NamedTuple):
    node: str
    gpu: str | None = None  # a GPU's UUID or index; None: no GPU charts


NodeChartsState = ChartsState[NodeSubject]


class NodeChartsViewModel(HistoryCharts[NodeSubject]):
    groups = (NODE_CHARTS, GPU_CHARTS)

    def show(self, node_id: str | None, gpu: str | None = None, range_: HistoryRange | None = None) -> None:
        self.show_subject(NodeSubject(node_id, gpu) if node_id is not None else None, range_)

    def set_gpu(self, gpu: str | None) -> None:
        s = self.state.value
        self.show(s.subject.node if s.subject is not None else None, gpu, s.range)

    async def fetch(self, subject: NodeSubject, range_: HistoryRange) -> tuple[HistorySeries | None, ...]:
        series = await self.client.node_history(subject.node, range_)
        gpu = await self.client.gpu_history(subject.node, subject.gpu, range_) if subject.gpu else None
        return series, gpu
