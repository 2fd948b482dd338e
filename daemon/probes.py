"""``/healthz`` and ``/metrics``: no token, for load balancers and Prometheus."""

from __future__ import annotations

from aiohttp import web

from daemon.api.models import ModelState
from daemon.listener import VERSION
from daemon.models.orchestrator import Orchestrator
from daemon.models.registry import Registry
from daemon.router.metrics import RouterMetrics


class Probes:
    def __init__(self, registry: Registry, orchestrator: Orchestrator, metrics: RouterMetrics) -> None:
        self._registry = registry
        self._orchestrator = orchestrator
        self._metrics = metrics

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": VERSION})

    async def metrics(self, request: web.Request) -> web.Response:
        for definition in self._registry.all():
            ready = self._orchestrator.status(definition).state == ModelState.READY
            self._metrics.model_ready.labels(definition.served_name).set(1 if ready else 0)
        return web.Response(body=self._metrics.render(), content_type="text/plain", charset="utf-8")
