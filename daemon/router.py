"""The OpenAI-compatible ``/v1`` router: resolve ``model``, proxy to its runtime, stream back.

Bodies are read up to the limit (64 MiB) and no further; responses are streamed chunk by chunk
(SSE is never buffered); a client that goes away cancels the upstream request, which frees the
runtime's slot. Each request leaves one access-log row.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from agent.api.models import InstanceInfo, InstanceState
from daemon.api.models import LOCAL_NODE, ModelDefinition, ModelState, RequestRecord, RouterStats
from daemon.config import DaemonConfig
from daemon.errors import error_response
from daemon.gate import DEFAULT_SLOTS, Gates, ModelGate, QueueFull
from daemon.history import History
from daemon.keys import KeyStore
from daemon.metrics import RouterMetrics
from daemon.orchestrator import Orchestrator

_LOGGER = logging.getLogger(__name__)

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length", "authorization"}
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
CONNECT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=None)
USAGE_TAIL_BYTES = 16384
REQUEST_ID = web.RequestKey("request_id", str)
RUNTIME_KEEPALIVE_S = 3.0


class BodyTooLarge(Exception):
    pass


def request_id_for(request: web.Request) -> str:
    given = request.headers.get("X-Request-Id", "")
    return given if REQUEST_ID_RE.match(given) else uuid.uuid4().hex


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The request body, refusing (without buffering past ``limit``) anything larger."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    buf = bytearray()
    async for chunk in request.content.iter_any():
        buf += chunk
        if len(buf) > limit:
            raise BodyTooLarge
    return bytes(buf)


@dataclass
class _Exchange:
    """What one proxied request did, for the access log."""

    started: float = field(default_factory=time.perf_counter)
    queue_s: float = 0.0
    first_byte: float | None = None
    tail: bytes = b""
    status: int = 0


class Router:
    def __init__(self, orchestrator: Orchestrator, keys: KeyStore, config: DaemonConfig,
                 history: History, metrics: RouterMetrics) -> None:
        self.orchestrator = orchestrator
        self.keys = keys
        self.config = config
        self.history = history
        self.metrics = metrics
        self.stats: dict[str, RouterStats] = {}
        self.gates = Gates()
        self._session: aiohttp.ClientSession | None = None

    def in_flight(self, served_name: str) -> int:
        stats = self.stats.get(served_name)
        return stats.in_flight if stats else 0

    async def open(self) -> None:
        # llama-server (cpp-httplib) closes idle keep-alive connections after 5 s: drop ours first,
        # or a request sent on a connection the runtime is closing fails with "Server disconnected".
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=RUNTIME_KEEPALIVE_S, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                              timeout=CONNECT_TIMEOUT)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # --- /v1/models ----------------------------------------------------------------------------
    async def list_models(self, request: web.Request) -> web.StreamResponse:
        denied = self._check_key(request)
        if denied is not None:
            return denied
        data = []
        for definition in self.orchestrator.registry.all():
            status = self.orchestrator.status(definition)
            if status.state == ModelState.READY or definition.start_on_request:
                data.append({"id": definition.served_name, "object": "model",
                             "created": int(status.started_at or 0), "owned_by": "mirbadllm"})
        return web.json_response({"object": "list", "data": data})

    def _check_key(self, request: web.Request) -> web.Response | None:
        if not self.config.keys_required:
            return None
        header = request.headers.get("Authorization", "")
        secret = header[7:].strip() if header.startswith("Bearer ") else request.headers.get("x-api-key")
        if self.keys.verify(secret) is None:
            message = "Missing API key: send 'Authorization: Bearer <key>'." if not secret else "Invalid API key."
            return error_response(401, "invalid_api_key", message)
        return None

    # --- every other /v1 path ------------------------------------------------------------------
    async def proxy(self, request: web.Request) -> web.StreamResponse:
        denied = self._check_key(request)
        if denied is not None:
            return denied
        try:
            body = await read_limited(request, self.config.max_body_bytes)
        except BodyTooLarge:
            limit_mib = self.config.max_body_bytes // (1024 * 1024)
            return error_response(413, "request_too_large", f"Request body is larger than {limit_mib} MiB.")
        definition, failure = self._resolve(body, request.method)
        if failure is not None:
            return failure
        assert definition is not None
        exchange = _Exchange()
        served = definition.served_name
        stats = self.stats.setdefault(served, RouterStats())
        stats.total += 1
        stats.in_flight += 1
        self.metrics.in_flight.labels(served).inc()
        try:
            response = await self._forward(request, definition, body, exchange)
        except BaseException:
            exchange.status = exchange.status or 499
            raise
        finally:
            stats.in_flight -= 1
            self.metrics.in_flight.labels(served).dec()
            ok = 200 <= exchange.status < 400
            if not ok:
                stats.failed += 1
                self.metrics.failures.labels(served).inc()
            self.metrics.requests.labels(served, str(exchange.status)).inc()
            self._log(request, definition, exchange)
        return response

    def _resolve(self, body: bytes, method: str) -> tuple[ModelDefinition | None, web.Response | None]:
        if method == "GET" and not body:
            return None, error_response(400, "model_required", "Send a JSON body with a 'model' field.")
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return None, error_response(400, "invalid_json", f"Request body is not valid JSON: {exc}")
        name = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(name, str) or not name:
            return None, error_response(400, "model_required", "The request needs a 'model' field (a string).")
        definition = self.orchestrator.registry.by_served_name(name)
        if definition is None:
            return None, error_response(404, "model_not_found", f"The model '{name}' does not exist.")
        return definition, _check_limits(payload)

    def _gate(self, definition: ModelDefinition) -> ModelGate:
        slots = definition.settings.parallel
        if slots is None:  # the runtime chose: use what its /slots reported, if anything yet
            link = self.orchestrator.links.get(definition.node)
            latest = link.latest_sample if link is not None else None
            sample = latest.instances.get(definition.id) if latest is not None else None
            slots = (sample.slots_total if sample is not None else None) or DEFAULT_SLOTS
        return self.gates.for_model(definition.id, slots, definition.max_queue)

    async def _admit(self, definition: ModelDefinition, gate: ModelGate,
                     exchange: _Exchange) -> tuple[str, dict[str, str], aiohttp.ClientSession] | web.Response:
        """Queue for the model (loading it when it allows that), then for a free slot."""
        waited = time.perf_counter()
        try:
            async with gate.queued():
                target = await self._ready_target(definition)
                if not isinstance(target, web.Response):
                    await gate.acquire_slot()
        except QueueFull:
            return error_response(503, "queue_full",
                                  f"The model '{definition.served_name}' has {gate.waiting} requests waiting; "
                                  "try again shortly.", headers={"Retry-After": "2"})
        finally:
            exchange.queue_s = time.perf_counter() - waited
        return target

    async def _ready_target(self, definition: ModelDefinition
                            ) -> tuple[str, dict[str, str], aiohttp.ClientSession] | web.Response:
        """Where to send the request, starting the model first when it allows that."""
        orch = self.orchestrator
        window = orch.maintenance.get(definition.id)  # a benchmark or tuning job (daemon.jobs)
        if window is not None:
            refusal: web.Response = window.refusal()  # 503 maintenance, Retry-After from the job's estimate
            return refusal
        instance = orch.instance(definition)
        link = orch.links.get(definition.node)
        if instance is not None and instance.state == InstanceState.READY and link is not None and link.online:
            return self._target(definition, instance)  # the hot path: no status to derive
        status = orch.status(definition)
        if status.state != ModelState.READY and definition.start_on_request:
            try:
                status = await orch.ensure_ready(definition.id)
            except Exception as exc:  # noqa: BLE001 - reported to the client below
                status = orch.status(definition)
                status.error = status.error or str(exc)
        if status.state != ModelState.READY:
            detail = f": {status.error}" if status.error else ""
            retry = "5" if status.state == ModelState.STARTING else "30"
            return error_response(503, "model_not_ready",
                                  f"The model '{definition.served_name}' is {status.state.value}{detail}",
                                  headers={"Retry-After": retry})
        instance = orch.instance(definition)
        assert instance is not None
        return self._target(definition, instance)

    def _target(self, definition: ModelDefinition,
                instance: InstanceInfo) -> tuple[str, dict[str, str], aiohttp.ClientSession]:
        orch = self.orchestrator
        orch.last_used[definition.id] = time.monotonic()
        if definition.node == LOCAL_NODE and instance.endpoint:
            # Hot path: straight to the local runtime's loopback port with its instance key.
            headers = {"Authorization": f"Bearer {instance.api_key}"} if instance.api_key else {}
            assert self._session is not None
            return instance.endpoint, headers, self._session
        link = orch.links[definition.node]  # a remote runtime is always reached through its agent
        return link.client.proxy_url(definition.id, ""), {}, link.client.session

    async def _forward(self, request: web.Request, definition: ModelDefinition, body: bytes,
                       exchange: _Exchange) -> web.StreamResponse:
        gate = self._gate(definition)
        target = await self._admit(definition, gate, exchange)
        if isinstance(target, web.Response):
            exchange.status = target.status
            return target
        try:
            return await self._send(request, definition, body, exchange, target)
        finally:
            gate.release_slot()

    async def _send(self, request: web.Request, definition: ModelDefinition, body: bytes, exchange: _Exchange,
                    target: tuple[str, dict[str, str], aiohttp.ClientSession]) -> web.StreamResponse:
        base, auth, session = target
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
        headers.update(auth)
        headers["X-Request-Id"] = request[REQUEST_ID]
        upstream_cm = None
        for attempt in range(2):
            try:
                upstream_cm = session.request(request.method, base + request.path_qs, data=body, headers=headers,
                                              timeout=CONNECT_TIMEOUT, allow_redirects=False)
                upstream = await upstream_cm.__aenter__()
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A pooled connection the runtime closed as we reused it (it hangs up, or the body
                # cannot be written): no answer was produced, so one retry on a fresh connection
                # is safe. Failing to connect at all (ClientConnectorError) is not retried.
                if attempt == 0 and not isinstance(exc, aiohttp.ClientConnectorError):
                    _LOGGER.debug("upstream closed a pooled connection; retrying once: %s", exc)
                    continue
                return self._unreachable(definition, exchange, exc)
            except (aiohttp.ClientError, TimeoutError) as exc:
                return self._unreachable(definition, exchange, exc)
        assert upstream_cm is not None
        try:
            return await self._relay(request, upstream, exchange)
        finally:
            upstream.close()  # no-op once fully read; drops the connection (and the generation) if not
            await upstream_cm.__aexit__(None, None, None)

    @staticmethod
    def _unreachable(definition: ModelDefinition, exchange: _Exchange, exc: BaseException) -> web.Response:
        exchange.status = 502
        return error_response(502, "upstream_unreachable",
                              f"The runtime of '{definition.served_name}' could not be reached: {exc}")

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse,
                     exchange: _Exchange) -> web.StreamResponse:
        exchange.status = upstream.status
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for key, value in upstream.headers.items():
            if key.lower() not in HOP_BY_HOP:
                response.headers.add(key, value)
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        if upstream.content_type == "text/event-stream":
            response.headers["Cache-Control"] = "no-cache"
            response.headers["X-Accel-Buffering"] = "no"  # tell any proxy in front not to buffer
        await response.prepare(request)
        tail = b""
        try:
            async for chunk in upstream.content.iter_any():
                if exchange.first_byte is None:
                    exchange.first_byte = time.perf_counter()
                await response.write(chunk)
                tail = (tail + chunk)[-USAGE_TAIL_BYTES:] if len(chunk) < USAGE_TAIL_BYTES else chunk[-USAGE_TAIL_BYTES:]
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            # The runtime died mid-answer. Tell an SSE client in its own terms, then cut the
            # connection without a final chunk so no client mistakes the answer for complete.
            _LOGGER.warning("runtime stream broke after %d bytes: %s", len(tail), exc)
            exchange.status = 502
            if upstream.content_type == "text/event-stream":
                error = {"error": {"message": "The model's runtime stopped in the middle of the answer.",
                                   "type": "server_error", "code": "upstream_broken"}}
                await response.write(f"data: {json.dumps(error)}\n\n".encode())
            if request.transport is not None:
                request.transport.abort()
            return response
        exchange.tail = tail
        await response.write_eof()
        return response

    def _log(self, request: web.Request, definition: ModelDefinition, exchange: _Exchange) -> None:
        now = time.perf_counter()
        prompt, completion = _usage_from_tail(exchange.tail)
        ttft = (exchange.first_byte - exchange.started - exchange.queue_s) * 1000 if exchange.first_byte else None
        self.history.record_request(RequestRecord(
            id=request[REQUEST_ID], ts=time.time(), model=definition.id, node=definition.node,
            path=request.path, status=exchange.status, queue_ms=exchange.queue_s * 1000, ttft_ms=ttft,
            total_ms=(now - exchange.started) * 1000, prompt_tokens=prompt, completion_tokens=completion))


# Sampling fields a runtime would try to honour at any size; refused before anything is queued.
LIMITS: dict[str, int] = {"n": 16, "best_of": 16, "max_tokens": 1 << 22, "max_completion_tokens": 1 << 22,
                          "n_predict": 1 << 22, "logprobs": 20, "top_logprobs": 20}


def _check_limits(payload: dict[str, object]) -> web.Response | None:
    for field, cap in LIMITS.items():
        value = payload.get(field)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, int) or value > cap or (value < 0 and field != "n_predict"):
            return error_response(400, "invalid_value", f"'{field}' must be an integer of at most {cap}.")
    return None


def _usage_from_tail(tail: bytes) -> tuple[int | None, int | None]:
    """Token counts from the last ``usage`` object in a response's tail (JSON or SSE)."""
    at = tail.rfind(b'"usage"')
    if at < 0:
        return None, None
    text = tail[at:].decode("utf-8", "replace")

    def number(key: str) -> int | None:
        found = re.search(rf'"{key}"\s*:\s*(\d+)', text)
        return int(found.group(1)) if found else None

    return number("prompt_tokens"), number("completion_tokens")
