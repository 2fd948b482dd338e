"""Live history charts over 5 min / 1 h / 24 h / 7 d: one implementation, parameterised by what it charts.

``HistoryCharts`` holds the subject being charted (a model, a node and maybe one of its GPUs), the
range, and the refresh loop that re-reads the subject's history while it is shown; a subclass says
only how to fetch the history of its subject (``fetch``) and, if it knows, whether the subject's
node has a GPU (``has_gpu``). Each fetched ``HistorySeries`` becomes a ``Plot``: plain columns
(timestamps and one tuple per metric, ``nan`` where a point has no value) the widget hands to the
plotting library as arrays.

``ChartsViewModel`` charts one model (``DaemonApi.model_history``); it also says whether the model's
node has a GPU (from the fleet's host figures), so the GPU charts can say "No GPU on this node"
instead of drawing empty axes. ``app.viewmodels.node_charts`` charts a node and one of its GPUs.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.models import HistoryRange, HistorySeries
from daemon.api.protocol import DaemonApi

if TYPE_CHECKING:
    from app.viewmodels.fleet import FleetViewModel

RANGES: tuple[tuple[HistoryRange, str], ...] = (("5m", "5 min"), ("1h", "1 h"), ("24h", "24 h"), ("7d", "7 d"))
# How often each range is worth re-reading: about one new point per refresh.
REFRESH_S: dict[str, float] = {"5m": 2.0, "1h": 15.0, "24h": 60.0, "7d": 300.0}


@dataclass(frozen=True)
class ChartSpec:
    title: str
    unit: str  # tok/s | % | bytes | °C | W | ""
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
class Plot:
    """One history series as columns: the timestamps, and per value key one value per timestamp."""

    ts: tuple[float, ...] = ()
    columns: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, series: HistorySeries | None, specs: tuple[ChartSpec, ...]) -> Plot:
        """The columns ``specs`` draw from ``series`` (None: nothing to draw)."""
        if series is None:
            return cls()
        return cls(tuple(p.ts for p in series.points), columns_of(series, specs))

    def latest(self, key: str) -> float | None:
        for value in reversed(self.columns.get(key, ())):
            if not math.isnan(value):
                return value
        return None

    def lines(self, spec: ChartSpec) -> list[tuple[float, ...]]:
        """One column per line of ``spec``'s chart; all ``nan`` for a key the history lacks."""
        return [self.columns.get(key, ()) or (math.nan,) * len(self.ts) for key, _legend in spec.series]


S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True)
class ChartsState(Generic[S]):
    """What is charted (``subject``, None: nothing), over which range, and one ``Plot`` per chart group."""

    subject: S | None = None
    range: HistoryRange = "5m"
    plots: tuple[Plot, ...] = ()
    error: str | None = None
    loading: bool = False
    node_has_gpu: bool | None = None  # None: not known (yet)

    def plot(self, group: int = 0) -> Plot:
        return self.plots[group] if group < len(self.plots) else Plot()

    @property
    def ts(self) -> tuple[float, ...]:
        return self.plot().ts

    @property
    def columns(self) -> dict[str, tuple[float, ...]]:
        return self.plot().columns

    def latest(self, key: str) -> float | None:
        return self.plot().latest(key)

    def message(self, spec: ChartSpec) -> str | None:
        """What a chart shows instead of axes, if anything."""
        return NO_GPU if spec.needs_gpu and self.node_has_gpu is False else None


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


class HistoryCharts(Generic[S]):
    """Charts of one subject: ``show_subject`` starts re-reading its history (every ``REFRESH_S`` of the
    range) until ``hide``; a failed read keeps the last plots and says why; an answer for a subject or
    range the user has since left is dropped.

    ``groups``: the chart groups, one ``Plot`` each, in the order ``fetch`` returns their series.
    """

    groups: tuple[tuple[ChartSpec, ...], ...] = ()

    def __init__(self, client: DaemonApi) -> None:
        self.client = client
        self.state: Observable[ChartsState[S]] = Observable(ChartsState())
        self._task: asyncio.Task[None] | None = None

    async def fetch(self, subject: S, range_: HistoryRange) -> tuple[HistorySeries | None, ...]:
        """The history of ``subject`` over ``range_``, one series per group (None: nothing to draw)."""
        raise NotImplementedError

    def has_gpu(self, subject: S) -> bool | None:
        """Whether ``subject``'s node has a GPU; None when not known."""
        return None

    def show_subject(self, subject: S | None, range_: HistoryRange | None = None) -> None:
        """Chart ``subject`` (None: nothing) and keep refreshing until ``hide``."""
        current = self.state.value
        new_range = range_ or current.range
        same = subject == current.subject and new_range == current.range
        if same and self._task is not None:
            return
        self.hide()
        self.state.set(ChartsState(subject=subject, range=new_range, loading=subject is not None,
                                   plots=current.plots if same else ()))
        if subject is not None:
            self._task = asyncio.ensure_future(self._run(new_range))

    def set_range(self, range_: HistoryRange) -> None:
        self.show_subject(self.state.value.subject, range_)

    def hide(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def refresh(self) -> None:
        s = self.state.value
        if s.subject is None:
            return
        subject = s.subject
        try:
            series = await self.fetch(subject, s.range)
        except DaemonError as exc:
            if self._still(s):
                self.state.set(replace(self.state.value, error=f"history unavailable: {exc.message}", loading=False))
            return
        if not self._still(s):
            return  # the user moved on while we waited
        plots = tuple(Plot.of(one, specs) for one, specs in zip(series, self.groups))
        self.state.set(ChartsState(subject, s.range, plots, node_has_gpu=self.has_gpu(subject)))

    def _still(self, asked: ChartsState[S]) -> bool:
        now = self.state.value
        return (now.subject, now.range) == (asked.subject, asked.range)

    async def _run(self, range_: HistoryRange) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(REFRESH_S[range_])


def node_has_gpu(fleet: FleetViewModel | None, node_id: str | None) -> bool | None:
    """Whether the fleet's latest figures for ``node_id`` list a GPU; None when it has none for it."""
    if fleet is None or node_id is None:
        return None
    host = next((h for h in fleet.snapshot.value.hosts if h.node == node_id), None)
    return None if host is None or not host.online else bool(host.gpus)


class ChartsViewModel(HistoryCharts[str]):
    """The model panel's charts: one model's history (``CHARTS``)."""

    groups = (CHARTS,)

    def __init__(self, client: DaemonApi, fleet: FleetViewModel | None = None) -> None:
        """``fleet``: the ``FleetViewModel`` whose host figures say which nodes have a GPU."""
        super().__init__(client)
        self.fleet = fleet

    def show(self, model_id: str | None, range_: HistoryRange | None = None) -> None:
        """Chart ``model_id`` (None: nothing) and keep refreshing until ``hide``."""
        self.show_subject(model_id, range_)

    async def fetch(self, subject: str, range_: HistoryRange) -> tuple[HistorySeries | None, ...]:
        return (await self.client.model_history(subject, range_),)

    def has_gpu(self, subject: str) -> bool | None:
        return node_has_gpu(self.fleet, self._node_of(subject))

    def _node_of(self, model_id: str) -> str | None:
        if self.fleet is None:
            return None
        view = next((m for m in self.fleet.snapshot.value.models if m.definition.id == model_id), None)
        return view.definition.node if view is not None else None
