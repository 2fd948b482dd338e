"""Charts of one node (CPU, memory, GPU memory and load) and of one of its GPUs (temperature, power),
over 5 min / 1 h / 24 h / 7 d, from ``DaemonClient.node_history`` and ``gpu_history``."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from app.viewmodels.charts import REFRESH_S, ChartSpec, columns_of
from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.models import HistoryRange
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class NodeChartsState:
    node_id: str | None = None
    gpu: str | None = None
    range: HistoryRange = "5m"
    ts: tuple[float, ...] = ()
    columns: dict[str, tuple[float, ...]] = field(default_factory=dict)
    gpu_ts: tuple[float, ...] = ()
    gpu_columns: dict[str, tuple[float, ...]] = field(default_factory=dict)
    error: str | None = None


class NodeChartsViewModel:
    def __init__(self, client: DaemonApi) -> None:
        self.client = client
        self.state: Observable[NodeChartsState] = Observable(NodeChartsState())
        self._task: asyncio.Task[None] | None = None

    def show(self, node_id: str | None, gpu: str | None = None, range_: HistoryRange | None = None) -> None:
        s = self.state.value
        new_range = range_ or s.range
        if (node_id, gpu, new_range) == (s.node_id, s.gpu, s.range) and self._task is not None:
            return
        self.hide()
        self.state.set(NodeChartsState(node_id=node_id, gpu=gpu, range=new_range))
        if node_id is not None:
            self._task = asyncio.ensure_future(self._run())

    def set_range(self, range_: HistoryRange) -> None:
        self.show(self.state.value.node_id, self.state.value.gpu, range_)

    def set_gpu(self, gpu: str | None) -> None:
        self.show(self.state.value.node_id, gpu, self.state.value.range)

    def hide(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def refresh(self) -> None:
        s = self.state.value
        if s.node_id is None:
            return
        try:
            series = await self.client.node_history(s.node_id, s.range)
            gpu = await self.client.gpu_history(s.node_id, s.gpu, s.range) if s.gpu else None
        except DaemonError as exc:
            self.state.set(NodeChartsState(s.node_id, s.gpu, s.range, s.ts, s.columns, s.gpu_ts, s.gpu_columns,
                                           f"history unavailable: {exc.message}"))
            return
        now = self.state.value
        if (now.node_id, now.gpu, now.range) != (s.node_id, s.gpu, s.range):
            return  # the user moved on while we waited
        self.state.set(NodeChartsState(
            s.node_id, s.gpu, s.range, tuple(p.ts for p in series.points), columns_of(series, NODE_CHARTS),
            tuple(p.ts for p in gpu.points) if gpu else (), columns_of(gpu, GPU_CHARTS) if gpu else {}))

    async def _run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(REFRESH_S[self.state.value.range])
