"""Prometheus metrics of the daemon (``GET /metrics``), in a registry of its own per app."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

_LOGGER = logging.getLogger(__name__)


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("mirbadllm_router_requests", "Requests routed, by model and status",
                                ["model", "status"], registry=self.registry)
        self.failures = Counter("mirbadllm_router_failures", "Routed requests that did not succeed",
                                ["model"], registry=self.registry)
        self.in_flight = Gauge("mirbadllm_router_in_flight", "Requests in flight, by model", ["model"],
                               registry=self.registry)
        self.model_ready = Gauge("mirbadllm_model_ready", "1 when the model is ready", ["model"],
                                 registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
