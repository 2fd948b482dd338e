"""Charts of one model over 5 min / 1 h / 24 h / 7 d, from ``DaemonClient.model_history``.

The view-model turns a ``HistorySeries`` into plain columns (timestamps and one tuple per metric,
``nan`` where a point has no value) so the widget can hand them to the plotting library as arrays.
It also says whether the model's node has a GPU (from the fleet's host figures), so the GPU charts
can say "No GPU on this node" instead of drawing empty axes.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.models import HistoryRange, HistorySeries
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

RANGES: tuple[tuple[HistoryRange, str], ...] = (("5m", "5 min"), ("1h", "1 h"), ("24h", "24 h"), ("7d", "7 d"))
# How often each range is worth re-reading: about one new point per refresh.
REFRESH_S: dict[str, float] = {"5m": 2.0, "1h": 15.0, "24h": 60.0, "7d": 300.0}


@dataclass(frozen=True)
class ChartSpec:
    title: str
    unit: str  # tok/s | % | bytes | ""
    series: tuple[tuple[str, str], ...]  # (history value key, legend)
    scale: float = 1.0
    needs_gpu: bool = False  # nothing to draw on a node without a GPU


NO_GPU = "No GPU on this node"


CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("Tokens per second", "tok/s", (("gen_tps", "Generated"), ("prompt_tps", "Prompt"))),
    ChartSpec("Requests", "", (("requests_running", "Running"), ("requests_waiting", "Waiting"))),
    ChartSpec("KV cache use", "%", (("kv_cache_ratio", "Used"),), scale=100.0),
    ChartSpec("Process memory", "bytes", (("rss_bytes", "Resident"),)),
    ChartSpec("GPU memory", "bytes", (("gpu_mem_bytes", "Used"),), needs_gpu=True),
    ChartSpec("GPU utilisation", "%", (("gpu_util_percent", "Busy"),), needs_gpu=True),
)


@dataclass(frozen=True)
class ChartsState:
    model_id: str | None = None
    range: HistoryRange = "5m"
    ts: tuple[float, ...] = ()
    columns: dict[str, tuple[float, ...]] = field(default_factory=dict)
    error: str | None = None
    loading: bool = False
    node_has_gpu: bool | None = None  # None: not known (yet)

    def message(self, spec: ChartSpec) -> str | None:
        """What a chart shows instead of axes, if anything."""
        return NO_GPU if spec.needs_gpu and self.node_has_gpu is False else None

    def latest(self, key: str) -> float | None:
        for value in reversed(self.columns.get(key, ())):
            if not math.isnan(value):
                return value
        return None


def columns_of(series: HistorySeries, specs: tuple[ChartSpec, ...] = CHARTS) -> dict[str, tuple[float, ...]]:
    columns: dict[str, tuple[float, ...]] = {}
    for spec in specs:
        for key, _legend in spec.series:
            values = []
            for point in series.points:
                raw = point.values.get(key)
                values.append(math.nan if raw is None else float(raw) * spec.scale)
            columns[key] = tuple(values)
    return columns


def node_has_gpu(fleet: Any, node_id: str | None) -> bool | None:
    """Whether the fleet's latest figures for ``node_id`` list a GPU; None when it has none for it."""
    if fleet is None or node_id is None:
        return None
    host = next((h for h in fleet.snapshot.value.hosts if h.node == node_id), None)
    return None if host is None or not host.online else bool(host.gpus)


class ChartsViewModel:
    def __init__(self, client: DaemonApi, fleet: Any = None) -> None:
        """``fleet``: the ``FleetViewModel`` whose host figures say which nodes have a GPU."""
        self.client = client
        self.fleet = fleet
        self.state: Observable[ChartsState] = Observable(ChartsState())
        self._task: asyncio.Task[None] | None = None

    def show(self, model_id: str | None, range_: HistoryRange | None = None) -> None:
        """Chart ``model_id`` (None: nothing) and keep refreshing until ``hide``."""
        current = self.state.value
        new_range = range_ or current.range
        if model_id == current.model_id and new_range == current.range and self._task is not None:
            return
        self.hide()
        keep = model_id == current.model_id and new_range == current.range
        self.state.set(ChartsState(model_id=model_id, range=new_range, loading=model_id is not None,
                                   ts=current.ts if keep else (), columns=current.columns if keep else {}))
        if model_id is not None:
            self._task = asyncio.ensure_future(self._run(model_id, new_range))

    def set_range(self, range_: HistoryRange) -> None:
        self.show(self.state.value.model_id, range_)

    def hide(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def refresh(self) -> None:
        s = self.state.value
        if s.model_id is None:
            return
        try:
            series = await self.client.model_history(s.model_id, s.range)
        except DaemonError as exc:
            self.state.set(ChartsState(s.model_id, s.range, s.ts, s.columns, f"history unavailable: {exc.message}",
                                       node_has_gpu=s.node_has_gpu))
            return
        if self.state.value.model_id != s.model_id or self.state.value.range != s.range:
            return  # the user moved on while we waited
        self.state.set(ChartsState(s.model_id, s.range, tuple(p.ts for p in series.points), columns_of(series),
                                   node_has_gpu=node_has_gpu(self.fleet, self._node_of(s.model_id))))

    def _node_of(self, model_id: str) -> str | None:
        if self.fleet is None:
            return None
        view = next((m for m in self.fleet.snapshot.value.models if m.definition.id == model_id), None)
        return view.definition.node if view is not None else None

    async def _run(self, model_id: str, range_: HistoryRange) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(REFRESH_S[range_])
