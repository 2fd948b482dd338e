"""Charts of one model over 5 min / 1 h / 24 h / 7 d, from ``DaemonClient.model_history``.

The view-model turns a ``HistorySeries`` into plain columns (timestamps and one tuple per metric,
``nan`` where a point has no value) so the widget can hand them to the plotting library as arrays.
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


CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("Tokens per second", "tok/s", (("gen_tps", "Generated"), ("prompt_tps", "Prompt"))),
    ChartSpec("Requests", "", (("requests_running", "Running"), ("requests_waiting", "Waiting"))),
    ChartSpec("KV cache use", "%", (("kv_cache_ratio", "Used"),), scale=100.0),
    ChartSpec("Process memory", "bytes", (("rss_bytes", "Resident"),)),
    ChartSpec("GPU memory", "bytes", (("gpu_mem_bytes", "Used"),)),
    ChartSpec("GPU utilisation", "%", (("gpu_util_percent", "Busy"),)),
)


@dataclass(frozen=True)
class ChartsState:
    model_id: str | None = None
    range: HistoryRange = "5m"
    ts: tuple[float, ...] = ()
    columns: dict[str, tuple[float, ...]] = field(default_factory=dict)
    error: str | None = None
    loading: bool = False

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


class ChartsViewModel:
    def __init__(self, client: Any) -> None:
        self.client = client
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
            self.state.set(ChartsState(s.model_id, s.range, s.ts, s.columns, f"history unavailable: {exc.message}"))
            return
        if self.state.value.model_id != s.model_id or self.state.value.range != s.range:
            return  # the user moved on while we waited
        self.state.set(ChartsState(s.model_id, s.range, tuple(p.ts for p in series.points), columns_of(series)))

    async def _run(self, model_id: str, range_: HistoryRange) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(REFRESH_S[range_])
