"""The tuning wizard, Qt-free: preset → quick or full search → plan with ETA → progress → results.

Progress comes from the event feed (each ``job.progress`` carries the job's view: its phase, the
candidate being tried and why, the scores so far, an ETA from the run's own pace). The results
compare the baseline with the best as re-measured in the confirmation stage; Apply writes the
winner's settings and may restart the model.

What a run tunes depends on the model's runtime (``WizardState.runtime``, read from the model when
the wizard opens): llama.cpp's settings, or vLLM's normalized ``vllm`` settings. The results show
the settings that changed between the saved ones and the winner's (``settings_changes``: llama.cpp's
``saved_settings``/``winner_settings``, vLLM's ``saved_vllm``/``winner_vllm``) and, for vLLM, the
winner's ``effective_config`` line as the daemon recorded it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any, TypeVar

from app import format as fmt
from app.viewmodels.benchmarks import (
    ComparisonRow,
    SettingChange,
    compare,
    settings_changes,
)
from app.viewmodels.observable import Emitter, Observable
from daemon.api.client import DaemonError
from daemon.api.contracts import (
    RUNTIME_LABELS,
    RuntimeId,
    VllmSettings,
    settings_type,
)
from daemon.api.jobs import (
    PRESETS,
    CandidateResult,
    JobView,
    PresetId,
    PresetInfo,
    SearchMode,
    TuneRequest,
    TuningPlan,
    TuningResult,
)
from daemon.api.models import Event
from daemon.api.protocol import DaemonApi

T = TypeVar("T")


class Step(IntEnum):
    PRESET = 0
    SEARCH = 1
    PLAN = 2
    PROGRESS = 3
    RESULTS = 4


SEARCH_TEXT: dict[str, str] = {
    "quick": "Quick: CPU threads, parallel slots and flash attention — the settings that matter most.",
    "full": "Full: also batch sizes, KV-cache types and GPU layers. Takes a few times longer.",
}
VLLM_SEARCH_TEXT: dict[str, str] = {
    "quick": "Quick: max concurrent sequences, and speculative decoding (MTP or a draft) where the model has it.",
    "full": "Full: also the KV-cache type (fp8 where memory allows), prefix caching, max batched tokens and "
            "async scheduling. Takes a few times longer.",
}


def search_text(runtime: str) -> dict[str, str]:
    """What quick and full search try, for the model's runtime."""
    return VLLM_SEARCH_TEXT if issubclass(settings_type(runtime), VllmSettings) else SEARCH_TEXT


@dataclass(frozen=True)
class WizardState:
    model_id: str
    runtime: RuntimeId = "llamacpp"
    step: Step = Step.PRESET
    preset: PresetId = "interactive"
    search: SearchMode = "quick"
    plan: TuningPlan | None = None
    job: JobView | None = None
    result: TuningResult | None = None
    applied: bool = False
    busy: bool = False
    error: str | None = None
    eta_at: float = 0.0  # the clock's time when the job's ETA last changed: it counts down from there

    def eta_left(self, now: float) -> float | None:
        """Seconds left: the daemon's last estimate less the time since it came (it re-estimates only
        between candidates, minutes apart), never below 0; None when there is no running job."""
        job = self.job
        if job is None or job.state.finished or not job.eta_s:
            return None
        return max(0.0, job.eta_s - (now - self.eta_at))

    def eta_text(self, now: float) -> str:
        left = self.eta_left(now)
        if left is None:
            return ""
        return " · almost done" if left < 1 else f" · about {fmt.duration(left)} left"

    @property
    def presets(self) -> tuple[PresetInfo, ...]:
        return PRESETS

    @property
    def search_text(self) -> dict[str, str]:
        return search_text(self.runtime)

    @property
    def runtime_label(self) -> str:
        return RUNTIME_LABELS.get(self.runtime, self.runtime)

    def changes(self) -> tuple[SettingChange, ...]:
        return settings_changes(self.result) if self.result is not None else ()

    def pair(self) -> tuple[CandidateResult | None, CandidateResult | None]:
        """(baseline, best) as the results page compares them: re-measured ones when confirmed."""
        r = self.result
        if r is None or not r.candidates:
            return None, None
        pool = r.confirmation or r.candidates
        baseline = next((c for c in pool if c.index == 0), r.candidates[0])
        ranked = [c for c in pool if c.index != 0 and c.score is not None and c.status == "measured"]
        best = next((c for c in pool if c.index == r.winner), None) if r.winner is not None else \
            max(ranked, key=lambda c: c.score or 0.0, default=None)
        return baseline, best

    def rows(self) -> tuple[ComparisonRow, ...]:
        baseline, best = self.pair()
        if baseline is None or best is None:
            return ()
        return compare(baseline.metrics, best.metrics)

    @property
    def headline(self) -> str:
        r = self.result
        if r is None:
            return ""
        if r.winner is not None and r.gain is not None:
            return f"Found settings {100 * (r.gain - 1):.0f} % better than the saved ones."
        return "No change: the saved settings are already the best found."


class TuningWizardViewModel:
    def __init__(self, client: DaemonApi, events: Emitter[Event], model_id: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self.state: Observable[WizardState] = Observable(WizardState(model_id=model_id))
        self._unsubscribe = events.subscribe(self._on_event)

    def close(self) -> None:
        self._unsubscribe()

    def _update(self, **changes: Any) -> None:
        job = changes.get("job")
        old = self.state.value.job
        if job is not None and (old is None or old.eta_s != job.eta_s):
            changes["eta_at"] = self.clock()
        self.state.set(replace(self.state.value, **changes))

    def eta_text(self) -> str:
        """" · about 3 min left", counting down between the daemon's estimates."""
        return self.state.value.eta_text(self.clock())

    def request(self) -> TuneRequest:
        s = self.state.value
        return TuneRequest(model=s.model_id, preset=s.preset, search=s.search)

    def choose_preset(self, preset: PresetId) -> None:
        self._update(preset=preset, plan=None)

    def choose_search(self, search: SearchMode) -> None:
        self._update(search=search, plan=None)

    async def load_model(self) -> None:
        """The model's runtime, for what the search texts and the results name."""
        try:
            view = await self.client.get_model(self.state.value.model_id)
        except DaemonError as exc:
            self._update(error=exc.message)
            return
        self._update(runtime=view.definition.runtime)

    def go(self, step: Step) -> None:
        if step <= Step.PLAN and self.state.value.job is None:
            self._update(step=step, error=None)

    async def make_plan(self) -> None:
        plan = await self._busy_with(self.client.plan_tune(self.request()))
        if plan is not None:
            self._update(busy=False, plan=plan, step=Step.PLAN)

    async def start(self) -> None:
        job = await self._busy_with(self.client.start_tune(self.request()))
        if job is not None:
            self._update(busy=False, job=job, step=Step.PROGRESS)

    async def _busy_with(self, call: Awaitable[T]) -> T | None:
        """``call``'s answer, shown as busy while it runs; None once its refusal is shown."""
        self._update(busy=True, error=None)
        try:
            return await call
        except DaemonError as exc:
            self._update(busy=False, error=exc.message)
            return None

    async def cancel(self) -> None:
        job = self.state.value.job
        if job is not None and not job.state.finished:
            self._update(busy=True)
            view = await self.client.cancel_job(job.id)
            await self._show_result(view)

    async def apply(self, restart: bool) -> None:
        job = self.state.value.job
        if job is None:
            return
        try:
            await self.client.apply_job(job.id, restart=restart)
        except DaemonError as exc:
            self._update(error=exc.message)
            return
        self._update(applied=True, error=None)

    async def _show_result(self, view: JobView) -> None:
        full = view if view.result is not None else await self.client.get_job(view.id)
        result = full.result if isinstance(full.result, TuningResult) else None
        runtime = result.runtime if result is not None else self.state.value.runtime
        self._update(job=full, result=result, runtime=runtime, step=Step.RESULTS, busy=False, error=full.error)

    def _on_event(self, event: Event) -> None:
        job = self.state.value.job
        data = event.data.get("job")
        if job is None or not isinstance(data, dict) or data.get("id") != job.id:
            return
        view = JobView.model_validate(data)
        self._update(job=view)
        if event.type == "job.finished":
            asyncio.ensure_future(self._show_result(view))
