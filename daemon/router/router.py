"""The OpenAI-compatible ``/v1`` router: resolve ``model``, proxy to its runtime, stream back.

Bodies are read up to the limit (64 MiB) and no further; responses are streamed chunk by chunk
(SSE is never buffered); a client that goes away cancels the upstream request, which frees the
runtime's slot. Every ``/v1`` request, refusals included, leaves exactly one access-log row (the
``access_log`` middleware writes it) with the API key's id and, when something failed, why.
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
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from agent.api.models import InstanceInfo, InstanceState
from daemon.api.models import LOCAL_NODE, ModelDefinition, ModelState, RouterStats
from daemon.config import DaemonConfig
from daemon.errors import CURRENT_REQUEST_ID, error_response
from daemon.router.gate import DEFAULT_SLOTS, Gates, ModelGate, QueueFull
from daemon.history import History
from daemon.keys import KeyStore
from daemon.router.metrics import RouterMetrics
from daemon.models.orchestrator import Orchestrator

_LOGGER = logging.getLogger(__name__)

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length", "authorization"}
REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
CONNECT_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=None)
USAGE_TAIL_BYTES = 16384
REQUEST_ID = web.RequestKey("request_id", str)
RUNTIME_KEEPALIVE_S = 3.0
# Connection-level failures before any answer (refused, reset, hung up before the headers) are
# retried on fresh connections, after these pauses; nothing has reached the client yet.
RETRY_PAUSES_S = (0.0, 0.25)
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
class _Exchange:
    """What one /v1 request did, for the access log."""

    started: float = field(default_factory=time.perf_counter)
    queue_s: float = 0.0
    first_byte: float | None = None
    tail: bytes = b""  # the answer's last USAGE_TAIL_BYTES (tokens and refusal reasons are read from it)
    status: int = 0
    key_id: str | None = None
    model: str | None = None
    node: str | None = None
    strip_usage: bool = False  # we asked the runtime for usage the client did not ask for
    failures: list[str] = field(default_factory=list)


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


@dataclass
class _Target:
    """Where one request goes: the pooled session for the first try, a fresh-connection one for retries."""

    base: str
    headers: dict[str, str]
    session: aiohttp.ClientSession
    fresh: aiohttp.ClientSession
    secret: str | None = None  # never written to a log or a row


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
        self._fresh: dict[str, aiohttp.ClientSession] = {}  # per node: force_close, never pooled
        self._children: dict[object, Any] = {}  # Prometheus children by model (and status)

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
        for fresh in self._fresh.values():
            await fresh.close()
        self._fresh.clear()

    def _fresh_session(self, node: str, ssl: object) -> aiohttp.ClientSession:
        """A session whose every request opens a new connection, for retries after a failed one."""
        session = self._fresh.get(node)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, force_close=True, ssl=ssl)  # type: ignore[arg-type]
            session = self._fresh[node] = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                                timeout=CONNECT_TIMEOUT)
        return session

    # --- the access log ------------------------------------------------------------------------
    @web.middleware
    async def access_log(self, request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """One row per /v1 request, whatever its outcome (installed outside the error middleware)."""
        if request.path != "/v1" and not request.path.startswith("/v1/"):
            return await handler(request)
        exchange = request[EXCHANGE] = _Exchange()
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

    # --- /v1/models ----------------------------------------------------------------------------
    async def list_models(self, request: web.Request) -> web.StreamResponse:
        denied = self._check_key(request)
        if denied is not None:
            return denied
        entries = (self._model_entry(definition) for definition in self.orchestrator.registry.all())
        return web.json_response({"object": "list", "data": [entry for entry in entries if entry is not None]})

    async def retrieve_model(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/models/{name}`` (the openai SDK's ``models.retrieve``): one entry of the list."""
        denied = self._check_key(request)
        if denied is not None:
            return denied
        name = request.match_info["name"]
        definition = self.orchestrator.registry.by_served_name(name)
        entry = self._model_entry(definition) if definition is not None else None
        if definition is None or entry is None:
            why = "does not exist" if definition is None else "is stopped and does not start on request"
            return error_response(404, "model_not_found", f"The model '{name}' {why}.")
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

    def _check_key(self, request: web.Request) -> web.Response | None:
        """Note which key the request used (a valid one, even when none is required); refuse if needed."""
        header = request.headers.get("Authorization", "")
        secret = header[7:].strip() if header.startswith("Bearer ") else request.headers.get("x-api-key")
        key_id = self.keys.verify(secret)
        _exchange(request).key_id = key_id
        if key_id is None and self.config.keys_required:
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
        definition, payload, failure = self._resolve(body, request.method)
        if failure is not None:
            return failure
        assert definition is not None and payload is not None
        exchange = _exchange(request)
        exchange.model, exchange.node = definition.id, definition.node
        body = self._ask_for_usage(request, payload, body, exchange)
        served = definition.served_name
        stats = self.stats.get(served)
        if stats is None:
            stats = self.stats[served] = RouterStats()
        in_flight, failures = self._model_metrics(served)
        stats.total += 1
        stats.in_flight += 1
        in_flight.inc()
        try:
            response = await self._forward(request, definition, body, exchange)
        except (asyncio.CancelledError, ConnectionResetError):
            exchange.status = 499  # also over a 200 already relayed: the client left mid-answer
            raise
        except BaseException:
            exchange.status = 500
            raise
        finally:
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

    def _resolve(self, body: bytes, method: str
                 ) -> tuple[ModelDefinition | None, dict[str, Any] | None, web.Response | None]:
        if method == "GET" and not body:
            return None, None, error_response(400, "model_required", "Send a JSON body with a 'model' field.")
        try:
            payload = _loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            return None, None, error_response(400, "invalid_json", f"Request body is not valid JSON: {exc}")
        name = payload.get("model") if isinstance(payload, dict) else None
        if not isinstance(name, str) or not name:
            return None, None, error_response(400, "model_required", "The request needs a 'model' field (a string).")
        definition = self.orchestrator.registry.by_served_name(name)
        if definition is None:
            return None, None, error_response(404, "model_not_found", f"The model '{name}' does not exist.")
        return definition, payload, _check_limits(payload)

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

    def _gate(self, definition: ModelDefinition) -> ModelGate:
        slots = definition.settings.parallel
        if slots is None:  # the runtime chose: use what its /slots reported, if anything yet
            link = self.orchestrator.links.get(definition.node)
            latest = link.latest_sample if link is not None else None
            sample = latest.instances.get(definition.id) if latest is not None else None
            slots = (sample.slots_total if sample is not None else None) or DEFAULT_SLOTS
        return self.gates.for_model(definition.id, slots, definition.max_queue)

    async def _admit(self, definition: ModelDefinition, gate: ModelGate,
                     exchange: _Exchange) -> _Target | web.Response:
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
                            ) -> _Target | web.Response:
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
                instance: InstanceInfo) -> _Target:
        orch = self.orchestrator
        orch.last_used[definition.id] = time.monotonic()
        if definition.node == LOCAL_NODE and instance.endpoint:
            # Hot path: straight to the local runtime's loopback port with its instance key.
            headers = {"Authorization": f"Bearer {instance.api_key}"} if instance.api_key else {}
            assert self._session is not None
            return _Target(instance.endpoint, headers, self._session, self._fresh_session(LOCAL_NODE, False),
                           instance.api_key)
        link = orch.links[definition.node]  # a remote runtime is always reached through its agent
        return _Target(link.client.proxy_url(definition.id, ""), {}, link.client.session,
                       self._fresh_session(definition.node, link.client.ssl))

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
                    target: _Target) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
        headers.update(target.headers)
        headers["X-Request-Id"] = request[REQUEST_ID]
        attempts = len(RETRY_PAUSES_S) + 1
        for attempt in range(attempts):
            # The first try may reuse a pooled connection; a retry always opens a new one, since
            # the pool may hold more connections the runtime has closed or reset.
            session = target.session if attempt == 0 else target.fresh
            try:
                upstream_cm = session.request(request.method, target.base + request.path_qs, data=body,
                                              headers=headers, timeout=CONNECT_TIMEOUT, allow_redirects=False)
                upstream = await upstream_cm.__aenter__()
                break
            except aiohttp.ClientSSLError as exc:  # a TLS refusal is not a dropped connection
                return self._unreachable(request, definition, exchange, target, exc)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # Refused, reset, or hung up before the response headers: nothing of the answer
                # has reached the client, so trying again on a fresh connection is safe.
                if attempt + 1 == attempts:
                    return self._unreachable(request, definition, exchange, target, exc)
                self._failed_attempt(request, definition, exchange, target, exc, attempt + 1)
                await asyncio.sleep(RETRY_PAUSES_S[attempt])
            except (aiohttp.ClientError, TimeoutError) as exc:
                return self._unreachable(request, definition, exchange, target, exc)
        try:
            return await self._relay(request, upstream, exchange)
        finally:
            upstream.close()  # no-op once fully read; drops the connection (and the generation) if not
            await upstream_cm.__aexit__(None, None, None)

    def _failed_attempt(self, request: web.Request, definition: ModelDefinition, exchange: _Exchange,
                        target: _Target, exc: BaseException, attempt: int) -> str:
        reason = f"attempt {attempt}: {_describe(exc, target.secret)}"
        exchange.failures.append(reason)
        _LOGGER.warning("request %s to '%s' failed before any answer, %s", request[REQUEST_ID],
                        definition.served_name, reason)
        return reason

    def _unreachable(self, request: web.Request, definition: ModelDefinition, exchange: _Exchange,
                     target: _Target, exc: BaseException) -> web.Response:
        attempt = sum(1 for failure in exchange.failures if failure.startswith("attempt ")) + 1
        self._failed_attempt(request, definition, exchange, target, exc, attempt)
        exchange.status = 502
        return error_response(502, "upstream_unreachable",
                              f"The runtime of '{definition.served_name}' could not be reached: "
                              f"{_describe(exc, target.secret)}")

    async def _relay(self, request: web.Request, upstream: aiohttp.ClientResponse,
                     exchange: _Exchange) -> web.StreamResponse:
        exchange.status = upstream.status
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for key, value in upstream.headers.items():
            if key.lower() not in HOP_BY_HOP:
                response.headers.add(key, value)
        sse = upstream.content_type == "text/event-stream"
        usage_filter = _UsageFilter() if sse and exchange.strip_usage else None
        if upstream.content_length is not None and usage_filter is None:
            response.content_length = upstream.content_length
        if sse:
            response.headers["Cache-Control"] = "no-cache"
            response.headers["X-Accel-Buffering"] = "no"  # tell any proxy in front not to buffer
        await response.prepare(request)
        # The last chunks, by reference, just enough to hold USAGE_TAIL_BYTES: joined once at the end.
        recent: list[bytes] = []
        held = 0
        relayed = 0
        while True:
            try:
                chunk = await upstream.content.readany()
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
                return await self._broken(request, response, exchange, sse, relayed, exc)
            if not chunk:
                break
            if exchange.first_byte is None:
                exchange.first_byte = time.perf_counter()
            size = len(chunk)
            relayed += size
            recent.append(chunk)
            held += size
            while held - len(recent[0]) >= USAGE_TAIL_BYTES:
                held -= len(recent.pop(0))
            out = usage_filter.feed(chunk) if usage_filter is not None else chunk
            if out:
                await response.write(out)  # a client that left raises ConnectionResetError: logged as 499
        if usage_filter is not None and (rest := usage_filter.rest()):
            await response.write(rest)
        exchange.tail = (recent[0] if len(recent) == 1 else b"".join(recent))[-USAGE_TAIL_BYTES:]
        await response.write_eof()
        return response

    @staticmethod
    async def _broken(request: web.Request, response: web.StreamResponse, exchange: _Exchange, sse: bool,
                      relayed: int, exc: BaseException) -> web.StreamResponse:
        """The runtime died mid-answer. Tell an SSE client in its own terms, then cut the
        connection without a final chunk so no client mistakes the answer for complete."""
        reason = f"the runtime's answer broke after {relayed} bytes: {_describe(exc, None)}"
        _LOGGER.warning("request %s: %s", request[REQUEST_ID], reason)
        exchange.status = 502
        exchange.failures.append(reason)
        if sse:
            error = {"error": {"message": "The model's runtime stopped in the middle of the answer.",
                               "type": "server_error", "code": "upstream_broken", "request_id": request[REQUEST_ID]}}
            await response.write(f"data: {json.dumps(error)}\n\n".encode())
        if request.transport is not None:
            request.transport.abort()
        return response

    def _log(self, request: web.Request, exchange: _Exchange) -> None:
        now = time.perf_counter()
        prompt, completion = _usage_from_tail(exchange.tail)
        ttft = (exchange.first_byte - exchange.started - exchange.queue_s) * 1000 if exchange.first_byte else None
        if exchange.key_id is not None:
            self.keys.count_use(exchange.key_id, (prompt or 0) + (completion or 0))
        # A RequestRecord's fields in REQUEST_COLUMNS order, without building (and validating) one.
        self.history.record_request_row((
            request.get(REQUEST_ID) or CURRENT_REQUEST_ID.get() or "-", time.time(), exchange.model,
            exchange.node, request.path, exchange.status, exchange.queue_s * 1000,
            ttft, (now - exchange.started) * 1000, prompt,
            completion, exchange.key_id,
            "; ".join(exchange.failures)[:2000] if exchange.failures else None))


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


def _describe(exc: BaseException, secret: str | None) -> str:
    """An exception's class and message for a log or a row, with no key in it."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if secret:
        text = text.replace(secret, "***")
    return re.sub(r"(Bearer\s+|sk-mirbad-)[A-Za-z0-9._~+/=-]+", r"\1***", text)[:500]


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
