"""Prometheus metrics of the daemon (``GET /metrics``), in a registry of its own per app.

The router's figures per model (its served name): requests by status, failures, in flight, time
to first byte and total time as histograms, prompt and completion tokens. They are recorded once
per request, when its access-log row is written (``observe``); each model's children are looked
up once. The fleet's figures (queue depth, nodes, GPUs) are read when scraped, by
``daemon.fleet_metrics.collector``, registered on the same registry.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_LOGGER = logging.getLogger(__name__)

# Seconds. A first token comes in tens of milliseconds on a warm small model, in seconds behind a
# long prompt or a queue, in a minute when the model loads on request; a whole answer can take minutes.
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
TOTAL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


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
        self.ttft = Histogram("mirbadllm_router_ttft_seconds", "Time to the answer's first byte, queueing "
                              "excluded, by model", ["model"], buckets=TTFT_BUCKETS, registry=self.registry)
        self.duration = Histogram("mirbadllm_router_request_seconds", "Time from request to the answer's "
                                  "last byte, by model", ["model"], buckets=TOTAL_BUCKETS, registry=self.registry)
        self.prompt_tokens = Counter("mirbadllm_router_prompt_tokens", "Prompt tokens the runtimes reported",
                                     ["model"], registry=self.registry)
        self.completion_tokens = Counter("mirbadllm_router_completion_tokens", "Completion tokens the "
                                         "runtimes reported", ["model"], registry=self.registry)
        self._per_model: dict[str, tuple[Any, Any, Any, Any]] = {}

    def observe(self, model: str, ttft_s: float | None, total_s: float | None, prompt: int | None,
                completion: int | None) -> None:
        """One request of ``model`` (its served name): its times (None: not answered) and tokens."""
        found = self._per_model.get(model)
        if found is None:
            found = self._per_model[model] = (self.ttft.labels(model), self.duration.labels(model),
                                              self.prompt_tokens.labels(model), self.completion_tokens.labels(model))
        ttft, duration, prompt_tokens, completion_tokens = found
        if ttft_s is not None:
            ttft.observe(ttft_s)
        if total_s is not None:
            duration.observe(total_s)
        if prompt:
            prompt_tokens.inc(prompt)
        if completion:
            completion_tokens.inc(completion)

    def render(self) -> bytes:
        return generate_latest(self.registry)
