"""One relay for runtime streams: the daemon's ``/v1`` router and the agent's proxy both use it.

The policy, the same wherever a request is relayed to a runtime:

- Hop-by-hop headers (RFC 9110 §7.6.1, the older proxy ones, and any header a ``Connection``
  header names) are dropped both ways, with ``Host``, ``Content-Length`` and ``Authorization``,
  which the relay sets itself.
- Runtime connections are pooled and dropped after ``RUNTIME_KEEPALIVE_S`` idle (llama-server
  closes idle keep-alive connections after 5 s: ours go first, so none is reused as it closes).
  10 s connect timeout, no read timeout: a generation may think for minutes. A plain-HTTP runtime
  on this machine (``Upstream.pool``) is reached by the lean client of ``core.runtime_http``
  (aiohttp's response parser and ``StreamReader`` without its request machinery), the same policy.
- A try that failed before any response byte (refused, reset, hung up before the headers, so
  nothing of the answer exists) is tried again, twice at most, each time on a fresh unpooled
  connection; a TLS refusal or a timeout is not retried, and nothing is once a response started.
  Every failed try is recorded and logged; when none got an answer, ``Unreachable`` says why.
- An upstream that dies mid-answer: an SSE client gets one error event (code ``upstream_broken``;
  not a second one when the upstream, an agent relaying a runtime, already sent it), then the
  connection is cut without a final chunk so no client takes the answer for complete. The reason
  is recorded and logged.
- Silence (``Silence``, for SSE answers): until the first ``data:`` event (a long prompt being
  read; llama-server sends its headers at once) the client gets an SSE comment every
  ``heartbeat_s``, so its read timeout and any proxy's do not fire; once events flow, an upstream
  silent for ``stall_after_s`` while the relay waits on it (not while a slow client drains) is cut:
  one error event (code ``upstream_stalled``) naming the model and the silence, ``Record.stalled``
  says why, and the connection is cut as for a broken answer. The upstream connection is closed,
  which frees the runtime's slot. Before the first event, silence is not stalling (a 50k-token
  prompt on a CPU reads for minutes): a runtime that reports its prompt's progress
  (``Silence.progress``, llama-server's ``/slots``) is polled from the first heartbeat on, and
  one whose progress stands still for ``stall_after_s`` (or that does not answer: a stopped
  process, a frozen driver) is cut the same way; a progressing prompt never is, however long.
  Without a progress signal (vLLM, MLX, an external endpoint) nothing is cut before the first event.
- A server that stops (``Endings``, the daemon's restart or update) gives the SSE answers in flight
  a grace to finish, then ends each still running with one error event (code ``server_stopping``)
  and cuts it, so a client knows to ask again rather than seeing a dropped connection.
- A client that goes away cancels the handler (servers run with ``handler_cancellation``), or
  its write raises ``ConnectionResetError``; either way the upstream answer is closed, which
  makes llama-server free the slot.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from core.runtime_http import Answer, RuntimePool
from core.silence import (
    Ending,
    Endings,
    PromptStalled,
    PromptWatch,
    Stalled,
    StallWatch,
)

HOP_BY_HOP = frozenset({
    "connection", "proxy-connection", "keep-alive", "te", "transfer-encoding", "upgrade",  # RFC 9110 §7.6.1
    "trailer", "trailers", "proxy-authenticate", "proxy-authorization",  # hop-by-hop in RFC 2616 too
})
SET_BY_RELAY = frozenset({"host", "content-length", "authorization"})
DROPPED = HOP_BY_HOP | SET_BY_RELAY

RUNTIME_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=None)
RUNTIME_KEEPALIVE_S = 3.0
# Pauses before the second and third try of a request that got no answer at all.
RETRY_PAUSES_S = (0.0, 0.25)
BROKEN_CODE = "upstream_broken"
STALLED_CODE = "upstream_stalled"
STOPPING_CODE = "server_stopping"
_BROKEN_MARK = f'"{BROKEN_CODE}"'.encode()
HEARTBEAT = b": waiting for the first token\n\n"  # an SSE comment: every client ignores it
# The runtime's count of work done on its prompts (tokens read and generated): any change is progress;
# None when it could not be read. Called with the answer's upstream (its base, headers, session).
Progress = Callable[["Upstream"], Awaitable["int | None"]]


Headers = CIMultiDictProxy[str] | CIMultiDict[str]


def forwardable(headers: Headers) -> CIMultiDict[str]:
    """``headers`` without the hop-by-hop ones, those ``Connection`` names, and those the relay sets."""
    named = headers.getall("Connection", ())
    if not named:
        return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in DROPPED)
    dropped = DROPPED | {h.strip().lower() for line in named for h in line.split(",")}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in dropped)


def _copy_headers(headers: Headers, into: CIMultiDict[str]) -> None:
    """``forwardable(headers)`` added to ``into``, without building it first."""
    dropped = DROPPED
    named = headers.getall("Connection", ())
    if named:
        dropped = dropped | {h.strip().lower() for line in named for h in line.split(",")}
    for k, v in headers.items():
        if k.lower() not in dropped:
            into.add(k, v)


def _header_lines(headers: Headers, upstream: Upstream, request_id: str | None) -> list[tuple[str, str]]:
    """What ``forwardable`` keeps, with ``upstream.headers`` and the request id in place of the
    client's own: the lean client's header lines."""
    dropped = DROPPED
    named = headers.getall("Connection", ())
    if named:
        dropped = dropped | {h.strip().lower() for line in named for h in line.split(",")}
    added = list(upstream.headers.items())
    if request_id is not None:
        added.append(("X-Request-Id", request_id))
    if added:
        dropped = dropped | {k.lower() for k, _v in added}
    return [(k, v) for k, v in headers.items() if k.lower() not in dropped] + added


def runtime_session(ssl: ssl_module.SSLContext | bool = True, *, fresh: bool = False) -> aiohttp.ClientSession:
    """Bytes pass through untouched: no decompression, no cookies, no overall timeout. ``fresh``:
    every request opens its own connection (a retry's), else pooled with the keep-alive above."""
    if fresh:
        connector = aiohttp.TCPConnector(limit=0, force_close=True, ssl=ssl)
    else:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=RUNTIME_KEEPALIVE_S, ttl_dns_cache=300, ssl=ssl)
    return aiohttp.ClientSession(connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                 timeout=RUNTIME_TIMEOUT)


@dataclass(slots=True)
class Upstream:
    """Where a runtime answers: ``base`` + the request's path, with ``headers`` (its key) added.

    ``session`` carries the first try (pooled); ``ssl`` is what a retry's fresh connection uses;
    ``secret`` is masked wherever a failure is written down; ``pool``: a plain-HTTP runtime on this
    machine, reached by the lean client of ``core.runtime_http`` instead of ``session``.
    """

    base: str
    headers: Mapping[str, str]
    session: aiohttp.ClientSession
    ssl: ssl_module.SSLContext | bool = True
    secret: str | None = None
    pool: RuntimePool | None = None


@dataclass
class Record:
    """What the relay saw of one exchange: the status the client got, when the first byte came,
    the answer's last bytes (``tail_bytes`` of them) and every failure on the way."""

    status: int = 0
    headers_at: float | None = None  # perf_counter when the answer's status and headers came
    first_byte: float | None = None
    tail: bytes = b""
    failures: list[str] = field(default_factory=list)
    events: int = 0  # SSE events relayed (llama.cpp and vLLM stream one token in each)
    heartbeats: int = 0  # SSE comments sent while the first token was awaited
    stalled: str | None = None  # why the answer was cut for silence (``Silence.stall_after_s``)


@dataclass(frozen=True, slots=True)
class Silence:
    """How an SSE answer's silences are handled: heartbeats before its first event, a cut after
    ``stall_after_s`` of silence once events flow. ``name`` is the model the client asked for;
    ``progress``: how to read the runtime's prompt progress, polled only while the first event is
    awaited past a heartbeat (None: the runtime offers none, nothing is cut before the first event)."""

    heartbeat_s: float
    stall_after_s: float
    name: str
    progress: Progress | None = None


class Rewrite(Protocol):
    """Changes an SSE answer on its way (the router drops a usage chunk the client did not ask for)."""

    def feed(self, chunk: bytes) -> bytes: ...

    def rest(self) -> bytes: ...


class Unreachable(Exception):
    """No try got an answer; the message is the last failure (exception class and text, no key)."""


def describe(exc: BaseException, secret: str | None = None) -> str:
    """An exception's class and message for a log or a row, with no key in it."""
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if secret:
        text = text.replace(secret, "***")
    return re.sub(r"(Bearer\s+|sk-mirbad-)[A-Za-z0-9._~+/=-]+", r"\1***", text)[:500]


async def relay(request: web.Request, upstream: Upstream, path_qs: str, body: bytes, *, record: Record,
                log: logging.Logger, label: str, request_id: str | None = None,
                sse_rewrite: Rewrite | None = None, tail_bytes: int = 0,
                silence: Silence | None = None, prepared: web.StreamResponse | None = None,
                endings: Endings | None = None) -> web.StreamResponse:
    """Send ``request`` (its method, headers and ``body``) to ``upstream.base + path_qs`` and stream
    the answer back; ``label`` ("request <id> to <where>") starts each line written to ``log``;
    ``silence``: heartbeats and the stall cut of an SSE answer (none: it may be silent for ever);
    ``prepared``: a 200 SSE answer the client already has (heartbeats while the model loaded): the
    runtime's events go on in it, and a refusal becomes one SSE error event there; ``endings``: the
    server's register of answers in flight, which its stop ends (``Endings``).
    Raises ``Unreachable`` when no try got an answer (nothing has been sent to the client then)."""
    if upstream.pool is not None:
        lines = _header_lines(request.headers, upstream, request_id)
        answer, retry_session = await _open(request.method, upstream, path_qs, lines, body, record, log, label)
    else:
        headers = forwardable(request.headers)
        headers.update(upstream.headers)
        if request_id is not None:
            headers["X-Request-Id"] = request_id
        answer, retry_session = await _open(request.method, upstream, upstream.base + path_qs, headers, body,
                                            record, log, label)
    try:
        if prepared is not None and (answer.status != 200 or answer.content_type != "text/event-stream"):
            return await _refused_in_stream(prepared, answer, record, request_id)
        return await _stream(request, answer, record, log, label, request_id, sse_rewrite, tail_bytes, silence,
                             prepared, endings, upstream)
    finally:
        answer.close()  # a no-op once fully read; drops the connection (and the generation) if not
        if retry_session is not None:
            await retry_session.close()


async def _open(method: str, upstream: Upstream, url: str, headers: CIMultiDict[str] | list[tuple[str, str]],
                body: bytes, record: Record, log: logging.Logger, label: str
                ) -> tuple[aiohttp.ClientResponse | Answer, aiohttp.ClientSession | None]:
    """The answer's status and headers, and the retry session it came on (closed after it), if any.
    With ``upstream.pool``, ``url`` is the path and query, ``headers`` the lean client's lines, and
    a retry's fresh connection is the pool's own (closed after it)."""
    session, retry_session, pool = upstream.session, None, upstream.pool
    failure: BaseException
    try:
        for attempt in range(1, len(RETRY_PAUSES_S) + 2):
            try:
                if pool is not None:
                    assert isinstance(headers, list)
                    return await pool.request(method, upstream.base, url, headers, body, fresh=attempt > 1), None
                answer = await session.request(method, url, data=body or None, headers=headers,
                                               timeout=RUNTIME_TIMEOUT, allow_redirects=False)
                return answer, retry_session
            except aiohttp.ClientSSLError as exc:  # a TLS refusal is not a dropped connection
                failure, again = exc, False
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # Refused, reset, or hung up before the response headers: nothing of the answer
                # exists, so trying again on a fresh connection is safe.
                failure, again = exc, attempt <= len(RETRY_PAUSES_S)
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure, again = exc, False
            reason = f"attempt {attempt}: {describe(failure, upstream.secret)}"
            record.failures.append(reason)
            log.warning("%s failed before any answer, %s", label, reason)
            if not again:
                raise Unreachable(describe(failure, upstream.secret)) from failure
            await asyncio.sleep(RETRY_PAUSES_S[attempt - 1])
            # The pool may hold more connections the runtime closed or reset: a retry opens its own.
            if pool is None:
                if retry_session is None:
                    retry_session = runtime_session(upstream.ssl, fresh=True)
                session = retry_session
        raise AssertionError("unreachable: the last try either answers or raises")
    except BaseException:
        if retry_session is not None:
            await retry_session.close()
        raise


class _Coalesced(web.StreamResponse):
    """A relayed answer whose first bytes were already here when it was prepared: its headers wait
    for them (microseconds) and both go out in one write, as ``web.Response`` does with its body."""

    _send_headers_immediately = False  # aiohttp's own switch (web.Response turns it off too)


async def _stream(request: web.Request, answer: aiohttp.ClientResponse | Answer, record: Record, log: logging.Logger,
                  label: str, request_id: str | None, sse_rewrite: Rewrite | None,
                  tail_bytes: int, silence: Silence | None = None,
                  prepared: web.StreamResponse | None = None, endings: Endings | None = None,
                  upstream: Upstream | None = None) -> web.StreamResponse:
    record.status, record.headers_at = answer.status, time.perf_counter()
    sse = answer.content_type == "text/event-stream"
    rewrite = sse_rewrite if sse else None
    content = answer.content
    try:
        ready = content.read_nowait()  # what came with the headers: sent with them, no wait
    except Exception:  # noqa: BLE001 - the answer's error: the first read below meets it again
        ready = b""
    if prepared is not None:
        response = prepared  # the client has had a 200 SSE answer and heartbeats already
    else:
        # Held headers must not wait on a partial event the usage filter keeps back.
        hold = ready and (rewrite is None or ready.endswith(b"\n\n"))
        response = _Coalesced(status=answer.status, reason=answer.reason) if hold else \
            web.StreamResponse(status=answer.status, reason=answer.reason)
        _copy_headers(answer.headers, response.headers)
        if answer.content_length is not None and rewrite is None:
            response.content_length = answer.content_length
        if sse:
            response.headers["Cache-Control"] = "no-cache"
            response.headers["X-Accel-Buffering"] = "no"  # tell any proxy in front not to buffer
        await response.prepare(request)
    # The last chunks, by reference, just enough to hold tail_bytes: joined once at the end.
    recent: list[bytes] = []
    held = relayed = 0
    last = final = b""
    silence = silence if sse else None
    pending: bytes | None = ready or None
    watch: StallWatch | None = None
    endings = endings if sse else None
    if endings is not None:
        endings.add(content)
    try:
        if silence is not None:
            if pending is None:
                pending = await _first_bytes(response, content, record, silence, upstream)
            watch = StallWatch(content, silence.stall_after_s)
        while True:
            try:
                if pending is not None:
                    chunk, pending = pending, None
                elif watch is None:
                    chunk = await content.readany()
                else:
                    watch.since, watch.reading = watch.loop.time(), True
                    chunk = await content.readany()
                    watch.reading = False
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
                await _broken(request, response, record, log, label, request_id, sse, relayed, last, exc)
                return response
            except Stalled:
                assert silence is not None
                await _stalled(request, response, record, log, label, request_id, relayed, silence)
                return response
            except Ending:
                assert endings is not None
                await _stopping(request, response, record, log, label, request_id, relayed, endings.what)
                return response
            if not chunk:
                break
            if record.first_byte is None:
                record.first_byte = time.perf_counter()
            size = len(chunk)
            relayed += size
            if sse:  # counted before the write: a stream the client cancels still counts what it got
                record.events += chunk.count(b"data:")
            if tail_bytes:
                recent.append(chunk)
                held += size
                while held - len(recent[0]) >= tail_bytes:
                    held -= len(recent.pop(0))
            out = rewrite.feed(chunk) if rewrite is not None else chunk
            if content.is_eof():  # the answer's last bytes: they go out with its end, in one write
                final = out
                break
            if out:
                await response.write(out)  # a client that left raises ConnectionResetError
                last = out
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:  # before the first bytes
        await _broken(request, response, record, log, label, request_id, sse, relayed, last, exc)
        return response
    except Ending:  # while the first token was awaited
        assert endings is not None
        await _stopping(request, response, record, log, label, request_id, relayed, endings.what)
        return response
    except PromptStalled:
        assert silence is not None
        await _stalled(request, response, record, log, label, request_id, relayed, silence, prompt=True)
        return response
    finally:
        if watch is not None:
            watch.cancel()
        if endings is not None:
            endings.discard(content)
    if rewrite is not None and (rest := rewrite.rest()):
        final += rest
    if recent:
        record.tail = (recent[0] if len(recent) == 1 else b"".join(recent))[-tail_bytes:]
    await response.write_eof(final)
    return response


async def _refused_in_stream(response: web.StreamResponse, answer: aiohttp.ClientResponse | Answer, record: Record,
                             request_id: str | None) -> web.StreamResponse:
    """The runtime refused (not a 200 SSE answer) after the client had its 200 and heartbeats: its
    error, in the OpenAI shape, as the stream's one event."""
    record.status, record.headers_at = answer.status, time.perf_counter()
    raw = await answer.content.read(64 * 1024)
    try:
        error = json.loads(raw)["error"]
        if not isinstance(error, dict):
            raise TypeError(error)
        error.setdefault("message", f"the runtime answered HTTP {answer.status}")
    except (ValueError, KeyError, TypeError):
        error = {"message": f"the runtime answered HTTP {answer.status}: {raw[:300].decode(errors='replace')}",
                 "type": "server_error" if answer.status >= 500 else "invalid_request_error",
                 "code": "upstream_error"}
    if request_id is not None:
        error.setdefault("request_id", request_id)
    record.failures.append(f"the runtime answered HTTP {answer.status}: {str(error.get('message'))[:300]}")
    await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
    await response.write_eof()
    return response


async def _first_bytes(response: web.StreamResponse, content: aiohttp.StreamReader, record: Record,
                       silence: Silence, upstream: Upstream | None) -> bytes:
    """The upstream's first bytes, however long a prompt takes to read: an SSE comment goes to the
    client every ``heartbeat_s`` meanwhile. A cancelled read loses nothing (the bytes stay buffered).
    From the first heartbeat on (never for an answer that starts sooner), a runtime with
    ``silence.progress`` is polled; raises ``PromptStalled`` once its progress stood still for
    ``stall_after_s`` (checked at each heartbeat)."""
    watch: PromptWatch | None = None
    try:
        while True:
            try:
                async with asyncio.timeout(silence.heartbeat_s):  # no task of its own, unlike wait_for
                    return await content.readany()
            except TimeoutError:
                if watch is not None and watch.stopped(silence.stall_after_s):
                    raise PromptStalled() from None
                await response.write(HEARTBEAT)
                record.heartbeats += 1
                if watch is None and silence.progress is not None and upstream is not None:
                    watch = PromptWatch(silence.stall_after_s, functools.partial(silence.progress, upstream))
    finally:
        if watch is not None:
            watch.cancel()


async def _stalled(request: web.Request, response: web.StreamResponse, record: Record, log: logging.Logger,
                   label: str, request_id: str | None, relayed: int, silence: Silence, *, prompt: bool = False) -> None:
    """The upstream went silent mid-answer (``prompt``: its prompt stopped progressing before the
    first token): one error event naming the model and the silence, then the connection is cut
    (no final chunk) and the upstream closed by the caller."""
    if prompt:
        reason = (f"the runtime of '{silence.name}' stopped progressing on the prompt for "
                  f"{silence.stall_after_s:g} s before its first token")
        told = (f"The model '{silence.name}' stopped progressing on the prompt for {silence.stall_after_s:g} s "
                "before its first token; the request was ended.")
    else:
        reason = (f"the runtime of '{silence.name}' went silent for {silence.stall_after_s:g} s in the middle "
                  f"of its answer (after {relayed} bytes)")
        told = (f"The model '{silence.name}' went silent for {silence.stall_after_s:g} s in the middle of its "
                "answer; the request was ended.")
    log.warning("%s: %s; the request was ended", label, reason)
    record.status, record.stalled = 504, reason
    record.failures.append(reason)
    await _cut(request, response, STALLED_CODE, told, request_id)


async def _stopping(request: web.Request, response: web.StreamResponse, record: Record, log: logging.Logger,
                    label: str, request_id: str | None, relayed: int, what: str) -> None:
    """The server stops (a restart, an update) with this answer still running: one error event
    saying so, then the connection is cut as for a broken answer."""
    reason = f"{what} stopped in the middle of the answer (after {relayed} bytes)"
    log.warning("%s: %s", label, reason)
    record.status = 503
    record.failures.append(reason)
    await _cut(request, response, STOPPING_CODE, f"{what[0].upper()}{what[1:]} stopped (a restart or an update) "
               "in the middle of this answer; send the request again in a moment.", request_id)


async def _broken(request: web.Request, response: web.StreamResponse, record: Record, log: logging.Logger,
                  label: str, request_id: str | None, sse: bool, relayed: int, last: bytes,
                  exc: BaseException) -> None:
    """The upstream died mid-answer: say so to an SSE client, then cut the connection without a
    final chunk so no client mistakes the answer for complete."""
    reason = f"the runtime's answer broke after {relayed} bytes: {describe(exc)}"
    log.warning("%s: %s", label, reason)
    record.status = 502
    record.failures.append(reason)
    tell = sse and _BROKEN_MARK not in last  # not twice when the upstream (an agent's relay) said it
    await _cut(request, response, BROKEN_CODE if tell else None,
               "The model's runtime stopped in the middle of the answer.", request_id)


async def _cut(request: web.Request, response: web.StreamResponse, code: str | None, message: str,
               request_id: str | None) -> None:
    """An answer ended before its end: one SSE error event (``code``; None: none), then the
    connection is cut without a final chunk, so no client takes the answer for complete."""
    if code is not None:
        error: dict[str, object] = {"message": message, "type": "server_error", "code": code}
        if request_id is not None:
            error["request_id"] = request_id
        try:
            await response.write(f"data: {json.dumps({'error': error})}\n\n".encode())
        except ConnectionResetError:
            pass  # the client left as well: nobody to tell
    if request.transport is not None:
        request.transport.abort()
