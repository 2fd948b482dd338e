"""OpenTelemetry traces of ``/v1`` requests, exported over OTLP/HTTP (``[tracing]`` in config.toml).

Off by default, and then nothing here is imported: the composition root builds a ``RouterTracing``
only when ``tracing.enabled`` is set (read at start; a change applies from the next start), and the
router checks one attribute per request. Nothing runs per chunk either way: the times of the
answer's headers and of its end come from the relay's ``Record``.

One trace per request: a SERVER span ``<method> <route>`` (the parent a client's ``traceparent``
names, when it sends one) with these children:

- ``admission``: the key check, the key's limits, the body read and the model resolved;
- ``queue``: waiting for room in the model's queue, for the model to load, for a free slot;
- ``upstream`` (CLIENT): the request to the runtime, or to the agent that relays it, until the
  answer's status and headers; its context is the ``traceparent`` sent along, so the agent and
  the runtime can join the trace (the agent's relay passes it on; llama-server ignores it);
- ``stream``: the answer's body, from the headers to the last chunk (an event ``first_chunk``
  marks the first token's arrival).

A fallback tried in the requested model's place gets a ``queue`` and an ``upstream`` span of its
own. Attributes: the model, the node, the HTTP status, the request id, token counts when the
answer reported them; never a prompt, an answer's text or a key. Error descriptions are our own
refusals' words or the relay's failure (an exception's class and text, keys masked), never the
runtime's answer body.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiohttp import web
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from core.relay import Record, Unreachable, Upstream
from daemon.api.models import ModelDefinition, TracingSettings
from daemon.errors import DaemonProblem

EXPORT_TIMEOUT_S = 10.0
T = TypeVar("T")  # what a queue span waits for (the router's Target)
_W3C = TraceContextTextMapPropagator()  # traceparent/tracestate only, whatever OTEL_PROPAGATORS says

# Attribute names: OpenTelemetry's semantic conventions where one fits, ours under "mirbadllm.".
MODEL, NODE, ANSWERED_BY, REQUEST_ID = "mirbadllm.model", "mirbadllm.node", "mirbadllm.answered_by", "mirbadllm.request_id"
STATUS, INPUT_TOKENS, OUTPUT_TOKENS = "http.response.status_code", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"


def _ns(perf: float) -> int:
    """A ``time.perf_counter()`` reading as the epoch nanoseconds a span's start or end takes."""
    return time.time_ns() - int((time.perf_counter() - perf) * 1e9)


class RouterTracing:
    """The tracer provider of the daemon's router: a sampler, one exporter, the service's name."""

    def __init__(self, settings: TracingSettings, exporter: SpanExporter | None = None) -> None:
        self.settings = settings
        self.provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}),
                                       sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        # Spans are exported in batches by the SDK's own thread: an export never waits in a request.
        self.provider.add_span_processor(BatchSpanProcessor(
            exporter or OTLPSpanExporter(endpoint=settings.endpoint, timeout=EXPORT_TIMEOUT_S)))
        self._tracer = self.provider.get_tracer("mirbadllm.router")

    def start(self, request: web.Request, started: float, request_id: str | None) -> RequestTrace:
        """The trace of one /v1 request that began at ``started`` (perf_counter)."""
        return RequestTrace(self._tracer, request, started, request_id)

    async def close(self) -> None:
        """Export what is still queued and stop (in a thread: the SDK's shutdown blocks)."""
        await asyncio.get_running_loop().run_in_executor(None, self.provider.shutdown)


class RequestTrace:
    """The spans of one request; the router calls it at each step, only when tracing is on."""

    __slots__ = ("_admission", "_context", "_sent", "_span", "_tracer")

    def __init__(self, tracer: trace.Tracer, request: web.Request, started: float, request_id: str | None) -> None:
        self._tracer = tracer
        parent = _W3C.extract(request.headers)  # a client's traceparent, when valid, is our parent
        route = request.match_info.route.resource  # /v1/models/{name}; the proxied paths as they are
        canonical = route.canonical if route is not None else "{path}"
        name = f"{request.method} {request.path if canonical.endswith('{path}') else canonical}"
        at = _ns(started)
        self._span: Span = tracer.start_span(name, parent, SpanKind.SERVER, start_time=at, attributes={
            "http.request.method": request.method, "url.path": request.path, REQUEST_ID: request_id or "-"})
        self._context: Context = trace.set_span_in_context(self._span, parent)
        self._admission: Span | None = tracer.start_span("admission", self._context, start_time=at)
        self._sent = False  # whether an upstream was asked (its answer's words are never written down)

    def admitted(self, model: str) -> None:
        """The key, its limits and the model all passed: the admission span ends."""
        if self._admission is not None:
            self._admission.set_attribute(MODEL, model)
            self._admission.end()
            self._admission = None

    async def queue(self, waiting: Awaitable[T], definition: ModelDefinition) -> T:
        """``waiting`` (the router's queue, a load, a slot) inside a ``queue`` span."""
        span = self._tracer.start_span("queue", self._context, attributes={MODEL: definition.id,
                                                                           NODE: definition.node})
        try:
            return await waiting
        except DaemonProblem as problem:
            span.set_attributes({STATUS: problem.status, "error.type": problem.code})
            span.set_status(Status(StatusCode.ERROR, f"{problem.code}: {problem.message}"[:300]))
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            span.set_status(Status(StatusCode.ERROR, "the client went away while waiting"))
            raise
        finally:
            span.end()

    def upstream(self, target: Upstream, definition: ModelDefinition, node: str | None) -> tuple[Upstream, Span]:
        """The ``upstream`` span, begun now, and ``target`` with its ``traceparent`` to send along
        (replacing one the client sent: the runtime's parent is this span)."""
        span = self._tracer.start_span("upstream", self._context, SpanKind.CLIENT,
                                       attributes={MODEL: definition.id, NODE: node or "external"})
        carrier: dict[str, str] = {}
        _W3C.inject(carrier, trace.set_span_in_context(span, self._context))
        self._sent = True
        return dataclasses.replace(target, headers={**target.headers, **carrier}), span

    async def relayed(self, relaying: Awaitable[web.StreamResponse], span: Span,
                      record: Record) -> web.StreamResponse:
        """``relaying`` (the relay's whole exchange): ``span`` ends when the answer's headers
        came; a ``stream`` span covers the body from there to its last chunk."""
        try:
            response = await relaying
        except Unreachable as exc:
            span.set_status(Status(StatusCode.ERROR, str(exc)[:300]))
            span.set_attribute("error.type", "unreachable")
            span.end()
            raise
        except BaseException as exc:
            gone = isinstance(exc, (asyncio.CancelledError, ConnectionResetError))
            self._ended(span, record, "the client went away" if gone else f"{type(exc).__name__}")
            raise
        self._ended(span, record, None, response.status)
        return response

    def _ended(self, span: Span, record: Record, failure: str | None, status: int | None = None) -> None:
        headers_at = record.headers_at
        if headers_at is None:  # no answer's headers yet: the upstream span is what failed
            span.set_status(Status(StatusCode.ERROR, failure or "no answer"))
            span.end()
            return
        answered = status if status is not None else record.status
        span.set_attribute(STATUS, answered)
        if answered >= 400:  # a client span errs on a 4xx too (the runtime refused what we sent)
            span.set_status(Status(StatusCode.ERROR, f"the runtime answered {answered}"))
        span.end(_ns(headers_at))
        stream = self._tracer.start_span("stream", self._context, start_time=_ns(headers_at))
        if record.first_byte is not None:
            stream.add_event("first_chunk", timestamp=_ns(record.first_byte))
        if failure is None and status is not None and record.status != status:  # broke mid-answer (502)
            failure = record.failures[-1][:300] if record.failures else "the answer broke"
        if failure is not None:
            stream.set_status(Status(StatusCode.ERROR, failure))
        stream.end()

    def finish(self, status: int, failures: list[str], model: str | None, node: str | None,
               answered_by: str | None, tokens: tuple[int | None, int | None]) -> None:
        """The request's answer is complete (or refused, or abandoned): its span ends."""
        span = self._span
        refused = status >= 400 and not self._sent
        if self._admission is not None:  # refused before a model was resolved (a key, a limit, the body)
            if refused:
                self._admission.set_status(Status(StatusCode.ERROR, _reason(failures, status)))
            self._admission.end()
            self._admission = None
        attributes: dict[str, Any] = {STATUS: status}
        for name, value in ((MODEL, model), (NODE, node), (ANSWERED_BY, answered_by),
                            (INPUT_TOKENS, tokens[0]), (OUTPUT_TOKENS, tokens[1])):
            if value is not None:
                attributes[name] = value
        span.set_attributes(attributes)
        if status >= 500 or (status >= 400 and refused):  # a server span errs on 5xx; ours on our refusals too
            span.set_status(Status(StatusCode.ERROR, _reason(failures, status) if refused else f"HTTP {status}"))
        span.end()


def _reason(failures: list[str], status: int) -> str:
    """Our own refusal's words (code: message), which hold no prompt and no key."""
    return failures[0][:300] if failures else f"HTTP {status}"
