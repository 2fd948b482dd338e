"""The bodies of the two jobs: settle the node, measure, and (for tuning) put the model back.

Both first wait for the model's in-flight requests (flagging the run as noisy when they do not
finish in time) and note other load on the machine. A benchmark measures the model's own running
process; a tuning run stops the model, measures candidates as separate instances, and restarts the
model with its saved settings at the end, on cancel and on failure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.api.client import AgentError
from agent.api.llamacpp import LlamaCppSettings, parse_args
from agent.api.models import InstanceState, TelemetrySample
from agent.api.runtimes import profile
from agent.api.vllm import VllmSettings, parse_cmd
from daemon.api.jobs import (
    BenchmarkRequest,
    BenchmarkResult,
    JobState,
    OverheadPathName,
    OverheadResult,
    SuiteOptions,
    TuneRequest,
    TuningResult,
)
from daemon.api.models import LOCAL_NODE, ModelDefinition, ModelState
from daemon.jobs.benchmark import measure
from daemon.jobs.calls import RuntimeTarget
from daemon.jobs.instances import NodeAccess, NodeTrouble, job_instances
from daemon.jobs.job import Job
from daemon.jobs.load import drain, other_models_busy, outside_load
from daemon.jobs.overhead import measure_overhead
from daemon.jobs.planner import CONFIRM_SLOTS
from daemon.jobs.presets import preset_for_model
from daemon.jobs.spaces import embedding_model, outline, space_for
from daemon.jobs.store import JobStore
from daemon.jobs.tuning import TuningFailed, TuningRun
from daemon.models.maintenance import JOB_PASS_HEADER, MaintenanceWindow
from daemon.models.orchestrator import Orchestrator, OrchestratorError
from daemon.models.registry import RegistryError


class JobFailed(Exception):
    """The job cannot be done; the message says why and what to do."""


@dataclass
class JobContext:
    orchestrator: Orchestrator
    access: NodeAccess
    window: MaintenanceWindow
    in_flight: Callable[[str], int]
    latest: Callable[[], TelemetrySample | None]
    publish: Callable[[], None]
    store: JobStore
    cpu_count: int = 1
    router_url: str = ""  # the daemon's own /v1 on this machine (overhead rounds)

    def watch(self, job: Job, model_id: str) -> Callable[[], None]:
        """A check to call between workloads: other models serving make the figures noisy."""
        def check() -> None:
            sample = self.latest()
            if sample is not None:
                job.flag(other_models_busy(sample, job_instances(model_id, sample.instances)))
        return check

    def set_eta(self, job: Job, seconds: float) -> None:
        job.eta_s = max(0.0, seconds)
        self.window.until = time.monotonic() + job.eta_s


async def settle(ctx: JobContext, job: Job, definition: ModelDefinition, timeout_s: float) -> None:
    """Drain the model's requests (noisy after ``timeout_s``), then note outside load."""
    job.state, job.phase = JobState.DRAINING, "waiting for requests in flight to finish"
    ctx.publish()
    if not await drain(lambda: ctx.in_flight(definition.served_name), ctx.latest, definition.id, timeout_s):
        job.flag(["noisy: in-flight requests at start"])
    sample = ctx.latest()
    if sample is not None:
        job.flag(outside_load(sample, ctx.cpu_count) + other_models_busy(sample, {definition.id}))
    job.state, job.phase = JobState.RUNNING, "measuring"
    ctx.publish()


@dataclass(frozen=True)
class ReadBack:
    """The settings a measured instance really ran with, read back from its argv (its container's
    Cmd for vLLM); the definition's where the instance has no argv to read."""

    settings: LlamaCppSettings
    vllm: VllmSettings | None
    extra_args: list[str]
    gpu_memory_utilization: float | None = None


def read_back(definition: ModelDefinition, argv: list[str]) -> ReadBack:
    """llama.cpp's ``parse_args`` for a llama.cpp model, vLLM's ``parse_cmd`` for a vLLM one (MLX's
    flags are the definition's: its argv is not read back)."""
    own = definition.runtime_settings
    if isinstance(own, VllmSettings):
        if not argv:
            return ReadBack(LlamaCppSettings(), own, list(definition.extra_args))
        vllm_settings, _model, _served, rest = parse_cmd(argv)
        return ReadBack(LlamaCppSettings(), vllm_settings, rest, _utilization(argv))
    if profile(definition.runtime).flags_lifted and argv:
        parsed = parse_args(argv)
        return ReadBack(parsed.settings, None, list(parsed.extra_args))
    return ReadBack(definition.settings, None, list(definition.extra_args))


def _utilization(argv: list[str]) -> float | None:
    """``--gpu-memory-utilization``'s value in a vLLM Cmd (``parse_cmd`` takes it as the agent's own)."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--gpu-memory-utilization" and i + 1 < len(argv) else \
            arg.partition("=")[2] if arg.startswith("--gpu-memory-utilization=") else None
        if value is not None:
            try:
                return float(value)
            except ValueError:
                return None
    return None


async def run_benchmark(ctx: JobContext, job: Job, definition: ModelDefinition,
                        request: BenchmarkRequest) -> BenchmarkResult:
    preset = preset_for_model(request.preset, embedding_model(definition))
    await settle(ctx, job, definition, request.suite.drain_timeout_s)
    instance = ctx.orchestrator.instance(definition)
    if instance is None or instance.state != InstanceState.READY:
        raise JobFailed(f"'{definition.id}' is not ready any more; start it and run the benchmark again")
    began = time.monotonic()

    def progress(text: str, fraction: float) -> None:
        job.message, job.progress = text, fraction * 0.98
        ctx.orchestrator.touch(definition.id)  # a benchmark is use, not idleness
        if fraction > 0:
            ctx.set_eta(job, (time.monotonic() - began) * (1 - fraction) / fraction)
        ctx.publish()

    target = ctx.access.target(instance, definition.served_name, request.suite.request_timeout_s)
    own = definition.runtime_settings
    fallback = own.max_num_seqs if isinstance(own, VllmSettings) else \
        own.parallel if isinstance(own, LlamaCppSettings) else None
    outcome, _plan, slots = await measure(target, preset, request.suite, fallback_slots=fallback, progress=progress)
    ctx.watch(job, definition.id)()
    overhead = None
    if request.suite.overhead_rounds:
        overhead = await _overhead(ctx, job, definition, target, request.suite, progress)
    argv = list(instance.argv)
    ran = read_back(definition, argv)
    return BenchmarkResult(
        model=definition.id, served_name=definition.served_name, node=definition.node, preset=preset.id,
        stamp=job.stamp, started_at=job.started_at, finished_at=time.time(), settings=ran.settings,
        runtime=definition.runtime, vllm=ran.vllm, extra_args=ran.extra_args,
        gpu_memory_utilization=ran.gpu_memory_utilization, argv=argv,
        config_hash=instance.config_hash, slots=slots, levels=outcome.levels, prefill=outcome.prefill,
        tool_calls=outcome.tool_calls, objective=outcome.objective, metrics=outcome.metrics,
        repetitions=outcome.repetitions, noisy=list(job.noisy), request_errors=outcome.errors,
        overhead=overhead, duration_s=time.monotonic() - began)


async def _overhead(ctx: JobContext, job: Job, definition: ModelDefinition, target: RuntimeTarget,
                    suite: SuiteOptions, progress: Callable[[str, float], None]) -> OverheadResult:
    """The same chat straight to the runtime (or through its node's agent) and through the router,
    interleaved; the router lets them through this job's window with its pass token."""
    if not ctx.router_url:
        raise JobFailed("the daemon does not know its own /v1 address; run the benchmark without --overhead")
    baseline: OverheadPathName = "runtime" if definition.node == LOCAL_NODE else "agent"
    router = RuntimeTarget(ctx.router_url, {JOB_PASS_HEADER: ctx.window.pass_token}, ctx.access.session,
                           definition.served_name, suite.request_timeout_s)
    return await measure_overhead(baseline, {baseline: target, "router": router}, suite.overhead_rounds,
                                  min(suite.max_tokens, 64),
                                  lambda f: progress(f"overhead: round {max(1, round(f * suite.overhead_rounds))} "
                                                     f"of {suite.overhead_rounds}", 0.99))


async def run_tune(ctx: JobContext, job: Job, definition: ModelDefinition, request: TuneRequest,
                   pace_hint: tuple[float, float]) -> TuningResult:
    preset = preset_for_model(request.preset, embedding_model(definition))
    status = await ctx.access.link.client.status()
    space = space_for(definition, status)
    plan = outline(request, space, pace_hint)
    run = TuningRun(job, request, definition, ctx.access, space, preset, plan.dims, ctx.publish,
                    ctx.watch(job, definition.id), pace_hint)
    run.result.notes += plan.notes
    job.result = run.result
    job.candidates_total = plan.candidates + CONFIRM_SLOTS
    ctx.set_eta(job, plan.eta_s)
    await settle(ctx, job, definition, request.suite.drain_timeout_s)
    was_running = ctx.orchestrator.status(definition).state in (ModelState.READY, ModelState.STARTING)
    ctx.store.mark_active({"model": definition.id, "node": definition.node, "was_running": was_running,
                           "job": job.id})
    try:
        if was_running:
            job.phase = "stopping the model for the run"
            ctx.publish()
            await ctx.orchestrator.stop(definition.id)
        await run.run()
    except (TuningFailed, NodeTrouble, AgentError, OrchestratorError) as exc:
        run.result.state, run.result.error = JobState.FAILED, str(exc)
    except asyncio.CancelledError:
        run.result.state, run.result.decision = JobState.CANCELLED, "cancelled: the saved settings are kept"
        raise
    finally:
        job.state, job.phase = JobState.RESTORING, "restoring the saved settings"
        ctx.publish()
        run.result.restore_note = await restore(ctx.orchestrator, definition, was_running)
        ctx.store.clear_active()
    return run.result


async def restore(orchestrator: Orchestrator, definition: ModelDefinition, was_running: bool) -> str | None:
    """Start the model again with its saved settings when it ran before; a note when it did not come back."""
    if not was_running:
        return None
    try:
        await orchestrator.start(definition.id, by_user=False)
        status = await orchestrator.wait_settled(definition.id, definition.startup_timeout_s + 5)
    except (OrchestratorError, RegistryError) as exc:
        return f"the model did not come back with its saved settings: {exc}"
    if status.state != ModelState.READY:
        return f"the model did not come back with its saved settings: {status.state.value} {status.error or ''}".strip()
    return None
