"""Handlers of ``/api/jobs`` (the routes are in ``daemon.routes``' one table).

    POST /api/jobs/benchmark        body BenchmarkRequest -> JobView (202); 409 job_conflict | model_not_ready
    POST /api/jobs/tune             body TuneRequest -> JobView (202); 409 job_conflict
    POST /api/jobs/tune/plan        body TuneRequest -> TuningPlan
    GET  /api/jobs                  ?model=ID&kind=benchmark|tune -> list[JobView] (no results)
    GET  /api/jobs/{id}             -> JobView with its result
    POST /api/jobs/{id}/cancel      -> JobView (after the model is restored)
    POST /api/jobs/{id}/apply       ?restart=0|1 -> ModelView; 409 no_winner
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from daemon.api.jobs import BenchmarkRequest, JobView, PlanStep, TuneRequest, TuningPlan
from daemon.errors import error_response, json_response, read_json, validation_message
from daemon.history import History
from daemon.jobs.manager import JobError, JobManager
from daemon.jobs.planner import CONFIRM_SLOTS
from daemon.jobs.presets import preset_for_model
from daemon.jobs.spaces import embedding_model, outline, space_for
from daemon.models.registry import Registry
from daemon.nodes.links import Links

MAX_BODY = 256 * 1024
Handler = Callable[["JobsApi", web.Request], Awaitable[web.StreamResponse]]


def _answers(handler: Handler) -> Callable[[JobsApi, web.Request], Awaitable[web.StreamResponse]]:
    """A bad body becomes the usual error envelope (a node agent's failure is the errors middleware's)."""
    @functools.wraps(handler)
    async def wrapped(self: JobsApi, request: web.Request) -> web.StreamResponse:
        try:
            return await handler(self, request)
        except ValidationError as exc:
            return error_response(422, "invalid_job", validation_message(exc))
        except ValueError as exc:
            return error_response(400, "invalid_job", str(exc))
    return wrapped


async def _body(request: web.Request) -> Any:
    return await read_json(request, MAX_BODY)


class JobsApi:
    def __init__(self, jobs: JobManager, registry: Registry, links: Links, history: History) -> None:
        self.jobs = jobs
        self._registry = registry
        self._links = links
        self._history = history

    @_answers
    async def start_benchmark(self, request: web.Request) -> web.StreamResponse:
        body = BenchmarkRequest.model_validate(await _body(request))
        return await self._started(self.jobs.start_benchmark(body), "job.benchmark", body.model)

    @_answers
    async def start_tune(self, request: web.Request) -> web.StreamResponse:
        body = TuneRequest.model_validate(await _body(request))
        return await self._started(self.jobs.start_tune(body), "job.tune", body.model)

    async def _started(self, start: Awaitable[JobView], action: str, model: str) -> web.StreamResponse:
        """A job started: audited as ``action`` on ``model``, answered 202 with its view."""
        view = await start
        await self._history.audit("admin", action, model, view.id)
        return json_response(view, status=202)

    @_answers
    async def plan_tune(self, request: web.Request) -> web.StreamResponse:
        return json_response(await self.plan(TuneRequest.model_validate(await _body(request))))

    async def plan(self, body: TuneRequest) -> TuningPlan:
        definition = self._registry.require(body.model)
        preset = preset_for_model(body.preset, embedding_model(definition))
        link = self._links.get(definition.node)
        if link is None or not link.online:
            raise JobError(503, "node_offline", f"node '{definition.node}' is not reachable")
        status = await link.client.status()
        start_s, bench_s = self.jobs.pace_hint(definition.id, preset.id)
        space = space_for(definition, status)
        plan = outline(body, space, (start_s, bench_s))
        steps = [PlanStep(dimension=d, values=values, goal=space.goal(d)[0], tradeoff=space.goal(d)[1])
                 for d, values in plan.steps]
        notes = [(f"{definition.id} is stopped during the run and restarted with its saved settings after it; "
                  "its /v1 requests are refused (503 maintenance) meanwhile."), *plan.notes]
        return TuningPlan(model=definition.id, preset=preset.id, search=body.search, steps=steps,
                          candidates=plan.candidates, confirmations=CONFIRM_SLOTS, start_s=start_s,
                          benchmark_s=bench_s, eta_s=plan.eta_s, notes=notes)

    @_answers
    async def list_jobs(self, request: web.Request) -> web.StreamResponse:
        kind = request.query.get("kind")
        if kind not in (None, "benchmark", "tune"):
            raise ValueError("kind must be benchmark or tune")
        return json_response(await self.jobs.list(request.query.get("model"), kind))

    @_answers
    async def get_job(self, request: web.Request) -> web.StreamResponse:
        return json_response(self.jobs.get(request.match_info["id"]))

    @_answers
    async def cancel_job(self, request: web.Request) -> web.StreamResponse:
        view = await self.jobs.cancel(request.match_info["id"])
        await self._history.audit("admin", "job.cancel", view.model, view.id)
        return json_response(view)

    @_answers
    async def apply_job(self, request: web.Request) -> web.StreamResponse:
        restart = request.query.get("restart") in ("1", "true")
        view = await self.jobs.apply(request.match_info["id"], restart)
        await self._history.audit("admin", "job.apply", view.definition.id, request.match_info["id"])
        return json_response(view)
