"""``JobManager``: benchmarks and tuning runs, one job at a time per node.

While a job runs on a model, its window in ``daemon.models.maintenance`` is open and the router answers that model's
``/v1`` requests with 503 ``maintenance`` and a ``Retry-After`` from the job's estimate. Progress
goes out on the event bus as ``job.started`` / ``job.progress`` / ``job.finished``, each carrying
the job's view; finished jobs are stored under the daemon's home and listed from there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from agent.api.client import AgentError
from daemon.api.jobs import (
    BenchmarkRequest,
    BenchmarkResult,
    JobKind,
    JobState,
    JobView,
    TuneRequest,
    TuningResult,
)
from daemon.api.models import ModelDefinition, ModelState, ModelView
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.jobs.instances import NodeAccess, runtime_session
from daemon.jobs.job import Job, view_of_result
from daemon.jobs.planner import DEFAULT_BENCHMARK_S, pace_from_history
from daemon.jobs.runs import JobContext, JobFailed, restore, run_benchmark, run_tune
from daemon.jobs.spaces import applied
from daemon.jobs.store import JobStore, job_id, split_job_id
from daemon.models.maintenance import Maintenance, MaintenanceWindow
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry
from daemon.nodes.links import Links
from daemon.telemetry import TelemetryCollector

_LOGGER = logging.getLogger(__name__)

CANCEL_WAIT_S = 300.0


class JobError(DaemonProblem):
    """A job refused (conflict, unknown job, no winner)."""


class JobManager:
    def __init__(self, registry: Registry, orchestrator: Orchestrator, links: Links, maintenance: Maintenance,
                 events: EventBus, in_flight: Callable[[str], int], telemetry: TelemetryCollector,
                 home: Path) -> None:
        self.registry = registry
        self.orch = orchestrator
        self.links = links
        self.maintenance = maintenance  # opened per job here, read by the router and the health monitor
        self.events = events
        self.in_flight = in_flight
        self.telemetry = telemetry
        self.store = JobStore(home)
        self._active: dict[str, Job] = {}  # node -> its one job
        self._jobs: dict[str, Job] = {}  # this daemon run's jobs, by id
        self._session: aiohttp.ClientSession | None = None
        # Where this machine reaches the daemon's own /v1 (``http://127.0.0.1:8484``): a benchmark's
        # overhead rounds go through it (daemon.jobs.overhead); set by daemon.deps from the listener.
        self.router_url: Callable[[], str] = lambda: ""

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = runtime_session()
        return self._session

    async def close(self) -> None:
        """Cancel what runs (each job restores its model) and close the session."""
        for job in list(self._active.values()):
            await self._cancel_and_wait(job, timeout=30.0)
        if self._session is not None:
            await self._session.close()

    # --- starting ------------------------------------------------------------------------------
    def _ensure_free(self, node: str) -> None:
        busy = self._active.get(node)
        if busy is not None:
            raise JobError(409, "job_conflict", f"a {busy.kind} job on '{busy.model}' is running on node "
                           f"'{node}' ({busy.id}); wait for it or cancel it")

    def _claim(self, model_id: str, kind: JobKind, preset: Any, estimate_s: float) -> tuple[Job, ModelDefinition]:
        definition = self.registry.require(model_id)
        self._ensure_free(definition.node)
        link = self.links.get(definition.node)
        if link is None or not link.online:
            raise JobError(503, "node_offline", f"node '{definition.node}' is not reachable")
        stamp = self.store.new_stamp(kind, definition.id)
        job = Job(id=job_id(kind, definition.id, stamp), kind=kind, model=definition.id, node=definition.node,
                  preset=preset, stamp=stamp)
        job.eta_s = estimate_s
        self._active[definition.node] = job
        self._jobs[job.id] = job
        self.maintenance.open(MaintenanceWindow(job.id, kind, definition.id, time.monotonic() + estimate_s))
        return job, definition

    def _window(self, model_id: str) -> MaintenanceWindow:
        window = self.maintenance.get(model_id)
        assert window is not None, "a job's context is made after its claim opened the window"
        return window

    def _context(self, job: Job, definition: ModelDefinition) -> JobContext:
        link = self.links[definition.node]
        return JobContext(orchestrator=self.orch, access=NodeAccess(link, self.session),
                          window=self._window(definition.id), in_flight=self.in_flight,
                          latest=lambda: self.telemetry.latest.get(definition.node),
                          publish=lambda: self._publish("job.progress", job), store=self.store,
                          router_url=self.router_url())

    async def start_benchmark(self, request: BenchmarkRequest) -> JobView:
        definition = self.registry.require(request.model)
        self._ensure_free(definition.node)
        if self.orch.status(definition).state != ModelState.READY:
            raise JobError(409, "model_not_ready", f"'{definition.id}' is not ready: start it, then benchmark it")
        job, definition = self._claim(request.model, "benchmark", request.preset, self._benchmark_estimate(request))
        ctx = self._context(job, definition)
        self._launch(job, definition, self._with_cpu_count(ctx, run_benchmark(ctx, job, definition, request)))
        return job.view()

    async def start_tune(self, request: TuneRequest) -> JobView:
        job, definition = self._claim(request.model, "tune", request.preset, 0.0)
        job.search = request.search
        ctx = self._context(job, definition)
        hint = self.pace_hint(definition.id, request.preset)
        self._launch(job, definition, self._with_cpu_count(ctx, run_tune(ctx, job, definition, request, hint)))
        return job.view()

    async def _with_cpu_count(self, ctx: JobContext, body: Coroutine[Any, Any, Any]) -> Any:
        try:
            ctx.cpu_count = (await ctx.access.link.client.status()).cpu_count
        except AgentError as exc:
            _LOGGER.debug("no agent status for the load check: %s", exc)
        except BaseException:  # cancelled while asking: the run never starts, and is closed unstarted
            body.close()
            raise
        return await body

    def _launch(self, job: Job, definition: ModelDefinition, body: Coroutine[Any, Any, Any]) -> None:
        self._publish("job.started", job)
        job.task = asyncio.get_running_loop().create_task(self._run(job, definition, body))

    async def _run(self, job: Job, definition: ModelDefinition, body: Coroutine[Any, Any, Any]) -> None:
        try:
            job.result = await body
            job.state = job.result.state if job.result.state.finished else JobState.SUCCEEDED
            job.error = job.result.error
        except asyncio.CancelledError:
            job.state, job.error = JobState.CANCELLED, None
        except (JobFailed, JobError, AgentError, ValueError) as exc:
            job.state, job.error = JobState.FAILED, str(exc)
        except Exception as exc:
            _LOGGER.exception("job %s failed", job.id)
            job.state, job.error = JobState.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            self._finish(job, definition)

    def _finish(self, job: Job, definition: ModelDefinition) -> None:
        job.finished_at, job.progress, job.eta_s = time.time(), 1.0, 0.0
        job.phase = job.state.value
        if job.result is not None:
            job.result.state, job.result.error = job.state, job.error
            job.result.finished_at = job.result.finished_at or job.finished_at
            job.result.noisy = list(job.noisy)
            if isinstance(job.result, TuningResult) and job.result.decision:
                job.message = job.result.decision
            try:
                self.store.save(job.result)
            except OSError as exc:
                _LOGGER.error("could not store the result of %s: %s", job.id, exc)
        self.maintenance.close(definition.id)
        self._active.pop(definition.node, None)
        self._publish("job.finished", job)

    def _publish(self, type_: str, job: Job) -> None:
        window = self.maintenance.get(job.model)
        if window is not None and job.eta_s is not None:
            window.until = time.monotonic() + job.eta_s
        self.events.publish(type_, job.model, job=job.view().model_dump(mode="json"))

    # --- estimates -----------------------------------------------------------------------------
    def _benchmark_estimate(self, request: BenchmarkRequest) -> float:
        for result in self.store.list(request.model, "benchmark"):
            if isinstance(result, BenchmarkResult) and result.preset == request.preset and result.duration_s:
                return result.duration_s
        return DEFAULT_BENCHMARK_S

    def pace_hint(self, model_id: str, preset: str) -> tuple[float, float]:
        last_bench: float | None = None
        for result in self.store.list(model_id):
            if result.preset != preset:
                continue
            if isinstance(result, TuningResult):
                measured = [c for c in result.candidates if c.benchmark_seconds]
                if measured:
                    return pace_from_history([c.start_seconds or 0.0 for c in measured],
                                             [c.benchmark_seconds or 0.0 for c in measured], None)
            elif last_bench is None and result.duration_s:
                last_bench = result.duration_s
        return pace_from_history([], [], last_bench)

    # --- queries and actions -------------------------------------------------------------------
    async def list(self, model: str | None = None, kind: str | None = None) -> list[JobView]:
        stored = await asyncio.to_thread(self.store.list, model, kind)
        # Running jobs, and this run's jobs that ended without a stored result (a failed benchmark).
        running = [j.view() for j in self._jobs.values()
                   if (j in self._active.values() or (j.result is None and j.state.finished))
                   and (model is None or j.model == model) and (kind is None or j.kind == kind)]
        ids = {v.id for v in running}
        return running + [view_of_result(r, job_id(r.kind, r.model, r.stamp), False) for r in stored
                          if job_id(r.kind, r.model, r.stamp) not in ids]

    def get(self, value: str) -> JobView:
        job = self._jobs.get(value)
        if job is not None:
            return job.view(with_result=True)
        try:
            kind, model, stamp = split_job_id(value)
        except ValueError as exc:
            raise JobError(404, "job_not_found", str(exc)) from exc
        result = self.store.load(kind, model, stamp)
        if result is None:
            raise JobError(404, "job_not_found", f"no job '{value}'")
        return view_of_result(result, value, True)

    async def cancel(self, value: str) -> JobView:
        job = self._jobs.get(value)
        if job is None or job.state.finished:
            return self.get(value)
        await self._cancel_and_wait(job, CANCEL_WAIT_S)
        return job.view(with_result=True)

    async def _cancel_and_wait(self, job: Job, timeout: float) -> None:
        task = job.task
        if task is None:
            return
        if not job.cancel_requested and job.state != JobState.RESTORING:
            job.cancel_requested = True
            task.cancel()
        await asyncio.wait([task], timeout=timeout)

    async def apply(self, value: str, restart: bool) -> ModelView:
        """Write the winner's settings onto the model's saved definition; restart it when asked."""
        result = self.get(value).result
        if not isinstance(result, TuningResult) or (result.winner_settings is None and result.winner_vllm is None):
            raise JobError(409, "no_winner", "this run has no winner to apply: the saved settings are already best")
        definition = self.registry.require(result.model)
        if definition.runtime != result.runtime:
            raise JobError(409, "no_winner", f"'{definition.id}' runs on {definition.runtime} now; this run tuned "
                           f"its {result.runtime} settings")
        definition = await self.registry.update(applied(definition, result))
        self.events.publish("model.updated", definition.id, applied_from=value)
        self.orch.on_instances(definition.node, {})
        status = self.orch.status(definition)
        if restart and status.state in (ModelState.READY, ModelState.STARTING, ModelState.FAILED):
            status = await self.orch.restart(definition.id)
        return ModelView(definition=definition, status=status)

    # --- boot -----------------------------------------------------------------------------------
    async def recover(self) -> None:
        """After a crash during a tuning run: stop its leftover instances and bring the model back."""
        for link in list(self.links):
            await link.first_sync.wait()
            stopped = await NodeAccess(link, self.session).remove_leftovers({d.id for d in self.registry.all()})
            if stopped:
                _LOGGER.warning("stopped leftover tuning instances on %s: %s", link.node_id, ", ".join(stopped))
        marker = self.store.read_active()
        if marker is None:
            return
        definition = self.registry.get(str(marker.get("model")))
        if definition is not None and marker.get("was_running"):
            note = await restore(self.orch, definition, True)
            _LOGGER.warning("a tuning run of %s was cut short; saved settings restored%s", definition.id,
                            f" ({note})" if note else "")
        self.store.clear_active()
