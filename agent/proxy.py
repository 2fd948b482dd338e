"""``/proxy/{id}/{path}``: any request to an instance's runtime, answered as it streams.

The agent adds the per-instance key, drops hop-by-hop headers and copies the runtime's answer
chunk by chunk (server-sent events arrive token by token). There is a connect timeout but no read
timeout: a generation may think for minutes. When the client goes away the handler is cancelled
(the server runs with ``handler_cancellation``), which closes the upstream request, and
llama-server frees the slot.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from agent.runtimes.run import RuntimeRun

_LOGGER = logging.getLogger(__name__)

UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=None)
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "trailers", "transfer-encoding", "upgrade", "host", "content-length", "authorization",
})


# llama-server closes idle keep-alive connections after 5 s; ours go first so none is reused as it closes.
RUNTIME_KEEPALIVE_S = 3.0


def new_proxy_session() -> aiohttp.ClientSession:
    """Bytes pass through untouched: no decompression, no cookies, no overall timeout."""
    return aiohttp.ClientSession(auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                                 timeout=UPSTREAM_TIMEOUT,
                                 connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=RUNTIME_KEEPALIVE_S))


def _forwardable(headers: CIMultiDictProxy[str] | CIMultiDict[str]) -> CIMultiDict[str]:
    named = {h.strip().lower() for h in headers.get("Connection", "").split(",") if h.strip()}
    return CIMultiDict((k, v) for k, v in headers.items()
                       if k.lower() not in HOP_BY_HOP and k.lower() not in named)


class UpstreamUnreachable(Exception):
    """The runtime refused or dropped the connection before answering."""


@contextlib.asynccontextmanager
async def _open(session: aiohttp.ClientSession, request: web.Request, url: str, headers: CIMultiDict[str],
                body: bytes) -> AsyncIterator[aiohttp.ClientResponse]:
    """The runtime's answer; one retry on a fresh connection when a pooled one was closed under us
    (nothing was processed then: llama-server hangs up on idle keep-alive connections)."""
    for attempt in range(2):
        try:
            upstream = await session.request(request.method, url, params=request.query, headers=headers,
                                             data=body or None, allow_redirects=False)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if attempt == 0 and not isinstance(exc, aiohttp.ClientConnectorError):
                _LOGGER.debug("the runtime closed a pooled connection; retrying once: %s", exc)
                continue
            raise
        async with upstream:  # as ``async with session.request(...)``: released, closed if unread
            yield upstream
        return


async def forward(request: web.Request, run: RuntimeRun, path: str,
                  session: aiohttp.ClientSession) -> web.StreamResponse:
    """Send ``request`` to ``run`` at ``/path`` and stream the answer back."""
    headers = _forwardable(request.headers)
    headers.update(run.auth_headers())
    body = await request.read()
    try:
        async with _open(session, request, f"{run.endpoint}/{path}", headers, body) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            response.headers.update(_forwardable(upstream.headers))
            if upstream.content_length is not None:
                response.content_length = upstream.content_length
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:  # aiohttp's write error when the client left is one too
                _LOGGER.debug("client went away during a proxied answer")
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
                # The status line has gone out: cutting the connection is the only honest signal.
                _LOGGER.info("the runtime at %s broke off its answer: %s", run.endpoint, exc)
                if request.transport is not None:
                    request.transport.close()
            return response
    except aiohttp.ClientError as exc:
        raise UpstreamUnreachable(f"the runtime at {run.endpoint} did not answer: {exc}") from exc
