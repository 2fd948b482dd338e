"""The OpenAI-compatible ``/v1`` router: resolve ``model``, proxy to its runtime, stream back.

Bodies are read up to the limit (64 MiB) and no further; responses are streamed chunk by chunk
(SSE is never buffered) by the one relay of ``core.relay`` (hop-by-hop headers, keep-alive,
the safe retry and a broken stream's ending are its policy, shared with the agent's proxy); a
client that goes away cancels the upstream request, which frees the runtime's slot. Where the
model answers (a runtime here, one through its node's agent, an external endpoint) is one
``daemon.nodes.answer.Target``, decided once per request. The router's own refusals are
``DaemonProblem``s, answered by the errors middleware. Every ``/v1`` request, refusals included,
leaves exactly one access-log row (the ``access_log`` middleware writes it) with the API key's id
and, when something failed, why.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from agent.api.llamacpp import lora_field
from agent.api.models import InstanceState
from agent.api.runtimes import profile
from core.relay import (
    RUNTIME_KEEPALIVE_S,
    Endings,
    Record,
    Silence,
    Unreachable,
    relay,
    runtime_session,
)
from core.runtime_http import RuntimePool
from daemon.api.models import ModelDefinition, ModelState, RouterStats
from daemon.config import DaemonConfig
from daemon.errors import CURRENT_REQUEST_ID, DaemonProblem
from daemon.history import History
from daemon.keys import KeyStore
from daemon.models.external import KeyUnreadable
from daemon.models.maintenance import JOB_PASS_HEADER, Maintenance
from daemon.models.orchestrator import Orchestrator, OrchestratorError
from daemon.models.presets import apply_preset
from daemon.models.states import Where
from daemon.nodes.answer import Target, at_endpoint, at_instance
from daemon.nodes.links import Links
from daemon.router.early import EarlyStream
from daemon.router.gate import DEFAULT_SLOTS, Gates, ModelGate, QueueFull
from daemon.router.metrics import RouterMetrics
from daemon.router.progress import slot_progress

if TYPE_CHECKING:  # daemon.deps imports it only when tracing is on: opentelemetry stays unloaded when off
    from daemon.tracing.spans import RequestTrace, RouterTracing

_LOGGER = logging.getLogger(__name__)

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
USAGE_TAIL_BYTES = 16384
REQUEST_ID = web.RequestKey("request_id", str)
USAGE_PATHS = ("/v1/chat/completions", "/v1/completions")


class BodyTooLarge(Exception):
    pass


def request_id_for(request: web.Request) -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if given and REQUEST_ID_RE.match(given) else os.urandom(16).hex()


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The request body, refusing (without buffering past ``limit``) anything larger."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@dataclass
class _Exchange(Record):
    """What one /v1 request did, for the access log. The relay fills in its ``Record`` part:
    status, first byte, the answer's last USAGE_TAIL_BYTES (tokens and refusal reasons are read
    from it) and failures."""

    started: float = field(default_factory=time.perf_counter)
    queue_s: float = 0.0
    trace: RequestTrace | None = None  # its spans, only when tracing is on (daemon.tracing)
    key_id: str | None = None
    model: str | None = None
    node: str | None = None
    strip_usage: bool = False  # we asked the runtime for usage the client did not ask for
    answered_by: str | None = None  # the fallback that answered in the requested model's place
    served: str | None = None  # the requested model's served name: its Prometheus label
    job_pass: str | None = None  # a job's window token (X-MirbadLLM-Job): its own requests pass its window
    early: EarlyStream | None = None  # a streamed request's heartbeats while its model queues or loads


EXCHANGE = web.RequestKey("exchange", _Exchange)


def _exchange(request: web.Request) -> _Exchange:
    found = request.get(EXCHANGE)
    if found is None:  # only when the access-log middleware is not installed (never in the daemon)
        found = request[EXCHANGE] = _Exchange()
    return found


def note_failure(request: web.Request, reason: str) -> None:
    """Record why a request failed in its access-log row (the middleware in daemon.server uses it)."""
    found = request.get(EXCHANGE)
    if found is not None:
        found.failures.append(reason)


class Router:
    def __init__(self, orchestrator: Orchestrator, links: Links, maintenance: Maintenance, keys: KeyStore,
                 config: DaemonConfig, history: History, metrics: RouterMetrics, *,
                 tracing: RouterTracing | None = None) -> None:
        self.orchestrator = orchestrator
        self.links = links  # which node answers for a model (daemon.nodes.links)
        self.maintenance = maintenance  # models a job owns right now (daemon.models.maintenance)
        self.keys = keys
        self.config = config
        self.history = history
        self.metrics = metrics
        self.tracing = tracing  # None: off (the default), nothing traced and no traceparent sent
        self.stats: dict[str, RouterStats] = {}
        self.gates = Gates()
        self.endings = Endings("the MirbadLLM daemon")  # the streams in flight, which a stop ends with an event
        self._session: aiohttp.ClientSession | None = None
        self._pool = RuntimePool(RUNTIME_KEEPALIVE_S)  # the relay's lean client to local runtimes
        self._children: dict[object, Any] = {}  # Prometheus children by model (and status)
        # A model's runtime went silent mid-answer (model id, why): daemon.deps sends it to the health monitor.
        self.on_stall: Callable[[str, str], None] = lambda _model, _why: None

    def in_flight(self, served_name: str) -> int:
        stats = self.stats.get(served_name)
        return stats.in_flight if stats else 0

    async def open(self) -> None:
        self._session = runtime_session(False)  # to local runtimes, with the relay's keep-alive

    async def close(self) -> None:
        self._pool.close()
        if self._session is not None:
            await self._session.close()
        if self.tracing is not None:
            await self.tracing.close()  # exports the spans still queued

    # --- the access log ------------------------------------------------------------------------
    @web.middleware
    async def access_log(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """One row per /v1 request, whatever its outcome (installed outside the error middleware)."""
        if request.path != "/v1" and not request.path.startswith("/v1/"):
            return await handler(request)
        exchange = request[EXCHANGE] = _Exchange()
        if self.tracing is not None:
            exchange.trace = self.tracing.start(request, exchange.started, request.get(REQUEST_ID))
        try:
            response = await handler(request)
        except (asyncio.CancelledError, ConnectionResetError):
            exchange.status = 499  # the client went away (nginx's code for it)
            exchange.failures.append("the client closed the connection before the answer was complete")
            raise
        except BaseException as exc:
            exchange.status = 500
            exchange.failures.append(f"{type(exc).__name__}: {exc}")
            raise
        else:
            exchange.status = exchange.status or response.status
            if exchange.status >= 400 and not exchange.failures:
                exchange.failures.append(_refusal_reason(response, exchange))
            return response
        finally:
            self._log(request, exchange)
            if exchange.trace is not None:
                exchange.trace.finish(exchange.status, exchange.failures, exchange.model, exchange.node,
                                      exchange.answered_by, _usage_from_tail(exchange.tail))

    # --- /v1/models ----------------------------------------------------------------------------
    async def list_models(self, request: web.Request) -> web.StreamResponse:
        self._check_key(request)
        data: list[dict[str, object]] = []
        for definition in self.orchestrator.registry.all():
            entry = self._model_entry(definition)
            if entry is not None:  # a model's adapters are listed as models of their own, owned by it
                data += [entry, *(_adapter_entry(entry, a.name) for a in definition.adapters)]
        return web.json_response({"object": "list", "data": data})

    async def retrieve_model(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/models/{name}`` (the openai SDK's ``models.retrieve``): one entry of the list."""
        self._check_key(request)
        name = request.match_info["name"]
        registry = self.orchestrator.registry
        definition = registry.by_served_name(name)
        adapter = registry.by_adapter_name(name) if definition is None else None
        if adapter is not None:
            definition = adapter[0]
        entry = self._model_entry(definition) if definition is not None else None
        if entry is not None and adapter is not None:
            entry = _adapter_entry(entry, adapter[0].adapters[adapter[1]].name)
        if definition is None or entry is None:
            why = "does not exist" if definition is None else "is stopped and does not start on request"
            raise DaemonProblem(404, "model_not_found", f"The model '{name}' {why}.")
        exchange = _exchange(request)
        exchange.model, exchange.node = definition.id, definition.node
        return web.json_response(entry)

    def _model_entry(self, definition: ModelDefinition) -> dict[str, object] | None:
        """The model as ``/v1/models`` lists it: ready, or loadable on request; else not listed."""
        status = self.orchestrator.status(definition)
        if status.state != ModelState.READY and not definition.start_on_request:
            return None
        return {"id": definition.served_name, "object": "model", "created": int(status.started_at or 0),
                "owned_by": "mirbadllm"}

    def _check_key(self, request: web.Request) -> None:
        """Note which key the request used (a valid one, even when none is required); refuse if needed."""
        header = request.headers.get("Authorization", "")
        secret = header[7:].strip() if header.startswith("Bearer ") else request.headers.get("x-api-key")
        key_id = self.keys.verify(secret)
        exchange = _exchange(request)
        exchange.key_id = key_id
        if (token := request.headers.get(JOB_PASS_HEADER)) is not None:
            exchange.job_pass = token  # a job's own request (daemon.jobs.overhead): checked against its window
            if key_id is None and self.maintenance.lets_through(token):
                return
        if key_id is None and self.config.keys_required:
            message = "Missing API key: send 'Authorization: Bearer <key>'." if not secret else "Invalid API key."
            raise DaemonProblem(401, "invalid_api_key", message)

    # --- every other /v1 path ------------------------------------------------------------------
    async def proxy(self, request: web.Request) -> web.StreamResponse:
        path = request.path  # a "." or ".." segment follows a "/": most paths have none to look at
        if "/." in path and any(part in (".", "..") for part in path.split("/")):  # decoded: %2e%2e, ..%2f
            # Relayed, an HTTP client folds them away: /v1/../../../unpair would reach the node's
            # agent past its proxy route, with the daemon's certificate.
            raise DaemonProblem(400, "invalid_path", "A path with '.' or '..' segments is not an API path.")
        self._check_key(request)
        self.keys.admit(_exchange(request).key_id)  # the key's limits: 429 before the body is read
        try:
            body = await read_limited(request, self.config.max_body_bytes)
        except BodyTooLarge:
            limit_mib = self.config.max_body_bytes // (1024 * 1024)
            raise DaemonProblem(413, "request_too_large", f"Request body is larger than {limit_mib} MiB.") from None
        definition, payload, body = self._resolve(body, request.method, request.path)
        exchange = _exchange(request)
        if exchange.job_pass is not None and exchange.key_id is None and self.config.keys_required:
            window = self.maintenance.get(definition.id)  # a job's token passes for its own model only
            if window is None or not window.lets_through(exchange.job_pass):
                raise DaemonProblem(401, "invalid_api_key", "Invalid API key.")
        exchange.model, exchange.node = definition.id, definition.node
        exchange.served = definition.served_name
        if exchange.trace is not None:
            exchange.trace.admitted(definition.id)
        body = self._ask_for_usage(request, payload, body, exchange)
        served = definition.served_name
        stats = self.stats.get(served)
        if stats is None:
            stats = self.stats[served] = RouterStats()
        in_flight, failures = self._model_metrics(served)
        stats.total += 1
        stats.in_flight += 1
        in_flight.inc()
        if payload.get("stream") is True:
            exchange.early = EarlyStream(request, definition.heartbeat_s)
        try:
            response = await self._forward(request, definition, body, exchange)
        except (asyncio.CancelledError, ConnectionResetError):
            exchange.status = 499  # also over a 200 already relayed: the client left mid-answer
            raise
        except DaemonProblem as problem:  # a refusal of ours: the errors middleware answers it...
            exchange.status = problem.status
            if exchange.early is None or (sent := await exchange.early.end_with(problem)) is None:
                raise
            exchange.failures.append(f"{problem.code}: {problem.message}"[:500])
            return sent  # ...unless the client had a 200 and heartbeats: then it is the stream's error event
        except BaseException:
            exchange.status = 500
            raise
        finally:
            if exchange.early is not None:
                await exchange.early.stop()
                exchange.early = None  # it holds the request, which holds the exchange: a cycle only a full GC frees
            stats.in_flight -= 1
            in_flight.dec()
            ok = 200 <= exchange.status < 400
            if not ok:
                stats.failed += 1
                failures.inc()
            self._requests_metric(served, exchange.status).inc()
        return response

    def _model_metrics(self, served: str) -> tuple[Any, Any]:
        """The model's in-flight gauge and failure counter (``labels()`` looked up once per model)."""
        found = self._children.get(served)
        if found is None:
            found = self._children[served] = (self.metrics.in_flight.labels(served),
                                              self.metrics.failures.labels(served))
        return found

    def _requests_metric(self, served: str, status: int) -> Any:
        found = self._children.get((served, status))
        if found is None:
            found = self._children[(served, status)] = self.metrics.requests.labels(served, str(status))
        return found

    def _resolve(self, body: bytes, method: str, path: str = "") -> tuple[ModelDefinition, dict[str, Any], bytes]:
        """The model a request names, its parsed body and the body to send: a request for a LoRA
        adapter goes to its base model with ``lora`` applying only that adapter; one for a model
        with adapters applies none (every adapter at scale 0, whatever the client sent)."""
        if method == "GET" and not body:
            raise DaemonProblem(400, "model_required", "Send a JSON body with a 'model' field.")
        try:
            payload = _loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DaemonProblem(400, "invalid_json", f"Request body is not valid JSON: {exc}") from None
        name = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(name, str) or not name:
            raise DaemonProblem(400, "model_required", "The request needs a 'model' field (a string).")
        registry = self.orchestrator.registry
        definition = registry.by_served_name(name)
        chosen: int | None = None
        if definition is None and (adapter := registry.by_adapter_name(name)) is not None:
            definition, chosen = adapter
        if definition is None:
            raise DaemonProblem(404, "model_not_found", f"The model '{name}' does not exist.")
        _check_limits(payload)
        if apply_preset(definition, path, payload):  # the model's defaults for what the request does not set
            body = _dumps(payload)
        if definition.adapters:
            payload["model"] = definition.served_name
            payload["lora"] = lora_field(definition.adapters, chosen)
            body = _dumps(payload)
        return definition, payload, body

    @staticmethod
    def _ask_for_usage(request: web.Request, payload: dict[str, Any], body: bytes, exchange: _Exchange) -> bytes:
        """A streamed completion reports its tokens only when asked: ask for the access log's sake,
        and remember to drop the usage-only chunk the client did not ask for."""
        if payload.get("stream") is not True or request.path not in USAGE_PATHS:
            return body
        options = payload.get("stream_options")
        if options is not None and not isinstance(options, dict):
            return body  # the runtime refuses it in its own words
        if options and options.get("include_usage") is True:
            return body
        payload["stream_options"] = {**(options or {}), "include_usage": True}
        exchange.strip_usage = True
        return _dumps(payload)

    def _gate(self, definition: ModelDefinition, where: Where | None) -> ModelGate:
        slots = definition.settings.parallel
        if slots is None:  # the runtime chose: use what its /slots reported, if anything yet
            latest = where.link.latest_sample if where is not None else None
            sample = latest.instances.get(definition.id) if latest is not None else None
            slots = (sample.slots_total if sample is not None else None) or DEFAULT_SLOTS
        return self.gates.for_model(definition.id, slots, definition.max_queue)

    async def _admit(self, definition: ModelDefinition, gate: ModelGate,
                     exchange: _Exchange, where: Where | None) -> Target:
        """Queue for the model (loading it when it allows that), then for a free slot."""
        waited = time.perf_counter()
        try:
            async with gate.queued():
                target = await self._ready_target(definition, gate.release_slot, exchange.job_pass, where)
                await gate.acquire_slot()
        except QueueFull:
            raise DaemonProblem(503, "queue_full",
                                f"The model '{definition.served_name}' has {gate.waiting} requests waiting; "
                                "try again shortly.", retry_after=2) from None
        finally:
            exchange.queue_s = time.perf_counter() - waited
        return target

    async def _ready_target(self, definition: ModelDefinition, release: Callable[[], None],
                            job_pass: str | None = None, where: Where | None = None) -> Target:
        """Where to send the request (``where``: the request's one lookup), starting the model first
        when it allows that; ``release`` frees the slot the request is about to take."""
        orch = self.orchestrator
        window = self.maintenance.get(definition.id)  # a benchmark or tuning job (daemon.jobs)
        if window is not None and not window.lets_through(job_pass):  # the job's own requests pass
            raise window.refusal()  # 503 maintenance, Retry-After from the job's estimate
        if where is not None and where.instance.state == InstanceState.READY and where.link.online:
            return self._at(definition, where, release)  # the hot path: one lookup, no status to derive
        status = orch.status(definition)
        if status.state != ModelState.READY and definition.start_on_request:
            try:
                status = await orch.ensure_ready(definition.id, self.in_flight)
            except Exception as exc:  # noqa: BLE001 - reported to the client below
                if isinstance(exc, OrchestratorError) and exc.code == "insufficient_memory":
                    raise DaemonProblem(503, exc.code, f"The model '{definition.served_name}' cannot be loaded: "
                                        f"{exc.message}", retry_after=30) from None  # says what uses the memory
                status = orch.status(definition)
                status.error = status.error or str(exc)
        if status.state != ModelState.READY:
            detail = f": {status.error}" if status.error else ""
            retry = 5 if status.state == ModelState.STARTING else 30
            raise DaemonProblem(503, "model_not_ready",
                                f"The model '{definition.served_name}' is {status.state.value}{detail}",
                                retry_after=retry)
        where = orch.where(definition)
        assert where is not None
        return self._at(definition, where, release)

    def _at(self, definition: ModelDefinition, where: Where, release: Callable[[], None]) -> Target:
        self.orchestrator.touch(definition.id)
        assert self._session is not None
        return at_instance(where.node, where.instance, where.link.client, self._session, self._pool,
                           named=definition.node, release=release)

    async def _forward(self, request: web.Request, definition: ModelDefinition, body: bytes,
                       exchange: _Exchange) -> web.StreamResponse:
        """To the model, else to its fallbacks in order: each tried when the one before refused
        before any byte of an answer (503: not ready and not loadable, no room, node offline, key
        unreadable; 502: unreachable). Never once an answer started. Each model gets the body with
        its own name in ``model`` (an external one its provider's)."""
        if not definition.fallbacks:
            return await self._forward_one(request, definition, body, exchange)
        first: DaemonProblem | None = None
        for candidate in self._candidates(definition):
            sent = body if candidate is definition else _for_fallback(body, definition, candidate)
            try:
                response = await self._forward_one(request, candidate, sent, exchange)
            except DaemonProblem as problem:
                if problem.status not in (502, 503) or exchange.status or exchange.first_byte is not None:
                    raise
                exchange.failures.append(f"'{candidate.id}' did not answer: {problem.code}: {problem.message}")
                first = first or problem
                continue
            if candidate is not definition:
                exchange.answered_by = candidate.id
                exchange.failures.append(f"answered by the fallback '{candidate.id}'")
            return response
        assert first is not None
        raise first

    def _candidates(self, definition: ModelDefinition) -> list[ModelDefinition]:
        """The model, its fallbacks in order, then theirs (breadth first), each model once; a name
        no model has now (removed since) is skipped."""
        registry = self.orchestrator.registry
        found, seen, index = [definition], {definition.id}, 0
        while index < len(found) and len(found) < MAX_CANDIDATES:
            for name in found[index].fallbacks:
                model = registry.get(name) or registry.by_served_name(name)
                if model is not None and model.id not in seen:
                    seen.add(model.id)
                    found.append(model)
            index += 1
        return found[:MAX_CANDIDATES]

    async def _forward_one(self, request: web.Request, definition: ModelDefinition, body: bytes,
                           exchange: _Exchange) -> web.StreamResponse:
        target = await self._target(definition, exchange)
        try:
            if target.model is not None:  # an endpoint's own name for the model
                body = _with_model(body, target.model)
            return await self._send(request, definition, body, exchange, target)
        finally:
            if target.release is not None:
                target.release()

    async def _target(self, definition: ModelDefinition, exchange: _Exchange) -> Target:
        """Where this request answers (``daemon.nodes.answer.Target``): the one question of its
        runtime's kind per request. An endpoint is called as it is; a runtime is queued for (and
        loaded when it allows that), then holds one of its slots. The row names the target's node
        from here on, a refusal on the way too."""
        if not profile(definition.runtime).on_node:
            exchange.node = None
            return await self._endpoint_target(definition)
        exchange.node = definition.node
        where = self.orchestrator.where(definition)  # its node ("auto": the one it runs on now), link, instance
        gate = self._gate(definition, where)
        admitting = self._admit(definition, gate, exchange, where)
        return await (admitting if exchange.trace is None else exchange.trace.queue(admitting, definition))

    async def _endpoint_target(self, definition: ModelDefinition) -> Target:
        """An external model's endpoint, with its key read now: refused (503) while its last probe
        failed or when the key file cannot be read."""
        external = self.orchestrator.external
        await external.ensure_probed(definition)  # once, for a model saved a moment ago
        status = external.status(definition)
        if status.state != ModelState.READY:
            raise DaemonProblem(503, "model_not_ready", f"The model '{definition.served_name}' is "
                                f"{status.state.value}: {status.error}", retry_after=30)
        try:
            upstream = external.upstream(definition)
        except KeyUnreadable as exc:
            raise DaemonProblem(503, "api_key_unreadable",
                                f"The model '{definition.served_name}' cannot be called: {exc}", retry_after=30) from None
        self.orchestrator.touch(definition.id)
        return at_endpoint(upstream, definition.provider_model or "")

    async def _send(self, request: web.Request, definition: ModelDefinition, body: bytes, exchange: _Exchange,
                    target: Target) -> web.StreamResponse:
        request_id = request[REQUEST_ID]
        path_qs = target.path(request.path_qs)
        if "x-api-key" in request.headers or "cookie" in request.headers or exchange.job_pass is not None:
            # the client's own key, cookies and a job's window token stay here
            request = request.clone(headers=_without_ours(request.headers))
        upstream = target.upstream
        trace = exchange.trace
        if trace is not None:  # the upstream span begins; its traceparent goes along
            upstream, span = trace.upstream(upstream, definition, target.node)
        prepared = await exchange.early.stop() if exchange.early is not None else None
        relaying = relay(request, upstream, path_qs, body, record=exchange, log=_LOGGER, prepared=prepared,
                         label=f"request {request_id} to '{definition.served_name}'", request_id=request_id,
                         sse_rewrite=_UsageFilter() if exchange.strip_usage else None, tail_bytes=USAGE_TAIL_BYTES,
                         silence=Silence(definition.heartbeat_s, definition.stall_timeout_s, definition.served_name,
                                         slot_progress if profile(definition.runtime).prompt_progress else None),
                         endings=self.endings)
        try:
            response = await (relaying if trace is None else trace.relayed(relaying, span, exchange))
        except Unreachable as exc:
            raise DaemonProblem(502, "upstream_unreachable",
                                f"The runtime of '{definition.served_name}' could not be reached: {exc}") from None
        if exchange.stalled is not None:
            self.on_stall(definition.id, exchange.stalled)
        elif exchange.status == 200:
            self.orchestrator.answered(definition.id)
        return response

    def _log(self, request: web.Request, exchange: _Exchange) -> None:
        now = time.perf_counter()
        prompt, completion = _usage_from_tail(exchange.tail)
        if completion is None and exchange.events:  # a stream cut before its usage (the client left)
            completion = streamed_tokens(exchange.events)
        ttft = (exchange.first_byte - exchange.started - exchange.queue_s) * 1000 if exchange.first_byte else None
        if exchange.key_id is not None:
            self.keys.count_use(exchange.key_id, (prompt or 0) + (completion or 0))
        if exchange.served is not None:  # Prometheus: the times of answers, the tokens of all
            ok = 200 <= exchange.status < 400
            self.metrics.observe(exchange.served, ttft / 1000 if ok and ttft is not None else None,
                                 now - exchange.started if ok else None, prompt, completion)
            if ok and exchange.events and exchange.first_byte is not None and not self.in_flight(exchange.served):
                # A stream that ran alone: its decode speed against the model's own (the Slow flag).
                self.orchestrator.decoded(exchange.answered_by or exchange.model or "", completion,
                                          now - exchange.first_byte)
        # A RequestRecord's fields in REQUEST_COLUMNS order, without building (and validating) one.
        self.history.record_request_row((
            request.get(REQUEST_ID) or CURRENT_REQUEST_ID.get() or "-", time.time(), exchange.model,
            exchange.node, request.path, exchange.status, exchange.queue_s * 1000,
            ttft, (now - exchange.started) * 1000, prompt,
            completion, exchange.key_id,
            "; ".join(exchange.failures)[:2000] if exchange.failures else None, exchange.answered_by))


MAX_CANDIDATES = 16  # a model and the fallbacks tried for it, at most
_NOT_FORWARDED = frozenset({"x-api-key", "cookie", JOB_PASS_HEADER.lower()})  # ours go to no upstream


def _without_ours(headers: Any) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _NOT_FORWARDED)


def _for_fallback(body: bytes, definition: ModelDefinition, fallback: ModelDefinition) -> bytes:
    """The body for ``fallback``: its served name in ``model``; the ``lora`` the router set for
    ``definition``'s adapters becomes the fallback's own (none applied), or goes."""
    payload = _loads(body)
    if not isinstance(payload, dict):
        return body
    payload["model"] = fallback.served_name
    if definition.adapters:
        if fallback.adapters:
            payload["lora"] = lora_field(fallback.adapters, None)
        else:
            payload.pop("lora", None)
    return _dumps(payload)


def _with_model(body: bytes, name: str) -> bytes:
    """``body`` with ``model`` set to ``name`` (a fallback's served name, a provider's model name)."""
    payload = _loads(body)
    if not isinstance(payload, dict) or payload.get("model") == name:
        return body
    payload["model"] = name
    return _dumps(payload)


class _UsageFilter:
    """Drops the usage-only SSE event (``"choices": []``) that we, not the client, asked for.

    Complete events pass at once; only a partial event waits for the rest of its bytes.
    """

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        complete, self._pending = data[:end + 2], data[end + 2:]
        if b'"usage"' not in complete:
            return complete
        events = complete.split(b"\n\n")[:-1]
        return b"".join(event + b"\n\n" for event in events if not _usage_only(event))

    def rest(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest


def _usage_only(event: bytes) -> bool:
    if b'"usage"' not in event:
        return False
    data = b"".join(line[5:] for line in event.split(b"\n") if line.startswith(b"data:"))
    try:
        parsed = json.loads(data)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("choices") == [] and bool(parsed.get("usage"))


def _adapter_entry(base: dict[str, object], name: str) -> dict[str, object]:
    """A LoRA adapter as ``/v1/models`` lists it: its base model's entry under its own name."""
    return {**base, "id": name, "owned_by": base["id"]}


def _refusal_reason(response: web.StreamResponse, exchange: _Exchange) -> str:
    """Why a request was answered with an error: our own error code, or what the runtime said."""
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        try:
            error = json.loads(response.body)["error"]
            return f"{error['code']}: {error['message']}"[:500]
        except (ValueError, KeyError, TypeError):
            pass
    said = exchange.tail[:300].decode("utf-8", "replace")
    return f"the runtime answered {exchange.status}: {said}" if said else f"HTTP {exchange.status}"


# Sampling fields a runtime would try to honour at any size; refused before anything is queued.
LIMITS: dict[str, int] = {"n": 16, "best_of": 16, "max_tokens": 1 << 22, "max_completion_tokens": 1 << 22,
                          "n_predict": 1 << 22, "logprobs": 20, "top_logprobs": 20}


def _check_limits(payload: dict[str, object]) -> None:
    for name, cap in LIMITS.items():
        value = payload.get(name)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, int) or value > cap or (value < 0 and name != "n_predict"):
            raise DaemonProblem(400, "invalid_value", f"'{name}' must be an integer of at most {cap}.")


def streamed_tokens(events: int) -> int:
    """The tokens a stream that ended before its ``usage`` delivered, from its SSE events: one token
    per event as llama.cpp and vLLM stream, less the chat's opening role event."""
    return max(0, events - 1)


def _usage_from_tail(tail: bytes) -> tuple[int | None, int | None]:
    """Token counts from the last ``usage`` object in a response's tail (JSON or SSE)."""
    at = tail.rfind(b'"usage"')
    if at < 0:
        return None, None
    prompt, completion = _PROMPT_TOKENS.search(tail, at), _COMPLETION_TOKENS.search(tail, at)
    return int(prompt.group(1)) if prompt else None, int(completion.group(1)) if completion else None


_PROMPT_TOKENS = re.compile(rb'"prompt_tokens"\s*:\s*(\d+)')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')


class _JsonOnly(dict):  # type: ignore[type-arg]
    """A body only ``json`` could parse, so written back with ``json`` too (orjson writes NaN as null)."""


def _loads(body: bytes) -> Any:
    """A request body, parsed with orjson; what only ``json`` takes (NaN, integers past 64 bits,
    UTF-16) is parsed by ``json``, which also words the error for a body that is not JSON at all."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = json.loads(body)
        return _JsonOnly(parsed) if isinstance(parsed, dict) else parsed


def _dumps(payload: dict[str, Any]) -> bytes:
    if not isinstance(payload, _JsonOnly):
        try:
            return orjson.dumps(payload)
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (254 levels)
            pass
    return json.dumps(payload).encode()
