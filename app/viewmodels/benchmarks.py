"""Benchmarks of one model: history, the job in progress, a chart over runs, and two runs compared.

Qt-free. Runs come from ``DaemonApi.list_jobs``; a running job is followed through the event
feed (``job.progress`` carries the job's view), and the history is re-read when it finishes.
The newest finished tuning run is read in full (``last_tuning``) so the tab can say what it changed
in the model's own runtime's settings (``describe_changes``: llama.cpp's, or vLLM's normalized ones
and the winner's effective configuration).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from app.viewmodels.observable import Emitter, Observable
from daemon.api.client import DaemonError
from daemon.api.contracts import RUNTIME_LABELS, VllmSettings, settings_type
from daemon.api.jobs import BenchmarkRequest, JobView, PresetId, TuningResult
from daemon.api.models import Event
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    scale: float = 1.0


METRICS: tuple[Metric, ...] = (
    Metric("single_tps", "Tokens/s, one request", "tok/s", True),
    Metric("top_agg_tps", "Tokens/s, all requests together", "tok/s", True),
    Metric("single_ttft_p50_ms", "First token, one request", "ms", False),
    Metric("top_ttft_p95_ms", "First token p95, under load", "ms", False),
    Metric("long_ttft_ms", "Long prompt, first token", "ms", False),
    Metric("long_prefill_tps", "Prompt processing", "tok/s", True),
    Metric("cached_ttft_ms", "Same long prompt again", "ms", False),
    Metric("max_agg_tps", "Tokens/s, every slot busy", "tok/s", True),
    Metric("emb_single_tps", "Embedding tokens/s, one request", "tok/s", True),
    Metric("emb_top_tps", "Embedding tokens/s, many at once", "tok/s", True),
    Metric("tool_valid", "Valid tool calls", "%", True, 100.0),
    Metric("objective_score", "Objective answers right", "%", True, 100.0),
)


@dataclass(frozen=True)
class ComparisonRow:
    label: str
    unit: str
    a: float | None
    b: float | None
    change: float | None  # b ÷ a, > 1 is better whatever the metric's direction
    better: bool | None


def compare(a: dict[str, float], b: dict[str, float], metrics: tuple[Metric, ...] = METRICS) -> tuple[ComparisonRow, ...]:
    """Rows for the metrics either side measured; ``change`` > 1 means ``b`` is better."""
    rows = []
    for m in metrics:
        va, vb = a.get(m.key), b.get(m.key)
        if va is None and vb is None:
            continue
        change = None
        if va and vb:
            change = vb / va if m.higher_is_better else va / vb
        better = None if change is None or abs(change - 1) < 0.005 else change > 1
        rows.append(ComparisonRow(m.label, m.unit, None if va is None else va * m.scale,
                                  None if vb is None else vb * m.scale, change, better))
    return tuple(rows)


@dataclass(frozen=True)
class SettingChange:
    """One setting the winner changes: its key (``vllm.max_num_seqs``, ``ctx_size``), flag and values."""

    key: str
    flag: str
    saved: str
    best: str


def _shown(value: Any) -> str:
    if value is None:
        return "default"
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_shown(v)}" for k, v in sorted(value.items()) if v not in (None, {})) or "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _diff(prefix: str, saved: BaseModel, best: BaseModel) -> tuple[SettingChange, ...]:
    changes = []
    for name, info in type(saved).model_fields.items():
        if info.exclude:  # the union's tag
            continue
        a, b = getattr(saved, name), getattr(best, name)
        if a != b:
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            changes.append(SettingChange(f"{prefix}{name}", str(extra.get("flag", "")), _shown(a), _shown(b)))
    return tuple(changes)


def settings_changes(result: TuningResult) -> tuple[SettingChange, ...]:
    """The settings the winner changes, from the runtime's own fields; () without a winner."""
    if issubclass(settings_type(result.runtime), VllmSettings):
        if result.winner_vllm is None or result.saved_vllm is None:
            return ()
        return _diff("vllm.", result.saved_vllm, result.winner_vllm)
    if result.winner_settings is None:
        return ()
    return _diff("", result.saved_settings, result.winner_settings)


def winner_config(result: TuningResult) -> str:
    """The winner's effective configuration as the daemon recorded it (vLLM's normalized line)."""
    pool = [*result.confirmation, *result.candidates]
    cand = next((c for c in pool if c.index == result.winner), None) if result.winner is not None else None
    return cand.effective_config if cand is not None else ""


def describe_changes(result: TuningResult) -> list[str]:
    """Lines for a person: the runtime, each changed setting, and vLLM's effective configuration."""
    label = RUNTIME_LABELS.get(result.runtime, result.runtime)
    changes = settings_changes(result)
    if not changes:
        return [f"{label}: the saved settings stay."] if result.winner is None else []
    lines = [f"{label} settings the best run changes:"]
    lines += [f"  {c.flag or c.key}: {c.saved} → {c.best}" for c in changes]
    config = winner_config(result)
    if issubclass(settings_type(result.runtime), VllmSettings) and config:
        lines.append(f"  vLLM runs it as: {config}")
    return lines


@dataclass(frozen=True)
class BenchmarksState:
    model_id: str | None = None
    runs: tuple[JobView, ...] = ()  # benchmarks, newest first
    tunings: tuple[JobView, ...] = ()
    active: JobView | None = None
    compare_ids: tuple[str, str] | None = None
    rows: tuple[ComparisonRow, ...] = ()
    last_tuning: TuningResult | None = None  # the newest finished tuning run, in full
    loading: bool = False
    error: str | None = None

    @property
    def tuning_lines(self) -> tuple[str, ...]:
        """What the newest tuning run found, in its runtime's settings; () when there is none."""
        r = self.last_tuning
        if r is None:
            return ()
        head = r.decision or ("Found better settings." if r.winner is not None else "No change.")
        return (f"Last tuning ({RUNTIME_LABELS.get(r.runtime, r.runtime)}, {r.preset}, {r.search}): {head}",
                *describe_changes(r))

    def chart(self, key: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(run times, values) of one metric over the finished benchmarks, oldest first."""
        points = [(r.started_at, r.summary[key]) for r in reversed(self.runs) if key in r.summary]
        return tuple(p[0] for p in points), tuple(p[1] for p in points)


class BenchmarksViewModel:
    def __init__(self, client: DaemonApi, events: Emitter[Event]) -> None:
        self.client = client
        self.state: Observable[BenchmarksState] = Observable(BenchmarksState())
        self.finished: Emitter[JobView] = Emitter()
        self._unsubscribe = events.subscribe(self._on_event)
        self._task: asyncio.Task[None] | None = None

    def close(self) -> None:
        self._unsubscribe()

    def show(self, model_id: str | None) -> None:
        """Show ``model_id``'s runs (None: nothing); loads them in the background."""
        if model_id == self.state.value.model_id and self.state.value.runs:
            return
        self.state.set(BenchmarksState(model_id=model_id, loading=model_id is not None))
        if model_id is not None:
            self._task = asyncio.ensure_future(self.refresh())

    async def refresh(self) -> None:
        model_id = self.state.value.model_id
        if model_id is None:
            return
        try:
            views = await self.client.list_jobs(model_id)
        except DaemonError as exc:
            self._update(loading=False, error=f"benchmarks unavailable: {exc.message}")
            return
        if self.state.value.model_id != model_id:
            return  # the user moved on
        active = next((v for v in views if not v.state.finished), None)
        runs = tuple(v for v in views if v.kind == "benchmark" and v.state.finished)
        tunings = tuple(v for v in views if v.kind == "tune" and v.state.finished)
        self._update(runs=runs, tunings=tunings, active=active, loading=False, error=None)
        self._recompare()
        await self._load_last_tuning(model_id, tunings)

    async def _load_last_tuning(self, model_id: str, tunings: tuple[JobView, ...]) -> None:
        if not tunings:
            self._update(last_tuning=None)
            return
        try:
            full = await self.client.get_job(tunings[0].id)
        except DaemonError as exc:
            _LOGGER.info("tuning run %s unavailable: %s", tunings[0].id, exc.message)
            return
        if self.state.value.model_id == model_id:
            self._update(last_tuning=full.result if isinstance(full.result, TuningResult) else None)

    async def run_benchmark(self, preset: PresetId = "interactive", *, overhead: bool = False) -> JobView | None:
        """``overhead``: also measure what the router adds (10 interleaved rounds each way)."""
        model_id = self.state.value.model_id
        if model_id is None:
            return None
        request = BenchmarkRequest(model=model_id, preset=preset)
        if overhead:
            request.suite.overhead_rounds = 10
        view: JobView = await self.client.start_benchmark(request)
        self._update(active=view, error=None)
        return view

    async def cancel(self) -> None:
        active = self.state.value.active
        if active is not None:
            await self.client.cancel_job(active.id)

    def select_compare(self, first: str | None, second: str | None) -> None:
        self._update(compare_ids=(first, second) if first and second else None)
        self._recompare()

    def _recompare(self) -> None:
        s = self.state.value
        ids = s.compare_ids
        if ids is None and len(s.runs) >= 2:
            ids = (s.runs[1].id, s.runs[0].id)  # the previous run against the latest
        by_id = {r.id: r for r in s.runs}
        if ids is None or ids[0] not in by_id or ids[1] not in by_id:
            self._update(rows=())
            return
        self._update(compare_ids=ids, rows=compare(by_id[ids[0]].summary, by_id[ids[1]].summary))

    def _on_event(self, event: Event) -> None:
        data = event.data.get("job")
        if not event.type.startswith("job.") or event.model != self.state.value.model_id or not isinstance(data, dict):
            return
        view = JobView.model_validate(data)
        if event.type == "job.finished":
            self._update(active=None)
            self.finished.emit(view)
            self._task = asyncio.ensure_future(self.refresh())
        else:
            self._update(active=view)

    def _update(self, **changes: Any) -> None:
        self.state.set(replace(self.state.value, **changes))
