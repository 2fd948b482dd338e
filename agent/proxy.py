"""``/proxy/{id}/{path}``: any request to an instance's runtime, answered as it streams.

The agent adds the per-instance key and relays the runtime's answer chunk by chunk (server-sent
events arrive token by token) with the one relay of ``core.relay``, which the daemon's router
uses too: the same hop-by-hop headers dropped, the same keep-alive, the same safe retry and the same
ending of a stream the runtime broke off. When the client goes away the handler is cancelled (the
server runs with ``handler_cancellation``), which closes the upstream request, and llama-server
frees the slot.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from agent.runtimes.run import RuntimeRun
from core.relay import (
    RUNTIME_KEEPALIVE_S,
    Record,
    Unreachable,
    Upstream,
    relay,
    runtime_session,
)
from core.runtime_http import RuntimePool

_LOGGER = logging.getLogger(__name__)


@dataclass
class RuntimeConnections:
    """The agent's pooled connections to its runtimes: the relay's lean client (``core.runtime_http``)
    for a plain-HTTP runtime, the session (``core.relay.runtime_session``) for any other."""

    session: aiohttp.ClientSession = field(default_factory=lambda: runtime_session(False))
    pool: RuntimePool = field(default_factory=lambda: RuntimePool(RUNTIME_KEEPALIVE_S))

    def upstream(self, run: RuntimeRun) -> Upstream:
        pool = self.pool if run.endpoint.startswith("http://") else None
        return Upstream(run.endpoint, run.auth_headers(), self.session, False, run.api_key, pool)

    async def close(self) -> None:
        self.pool.close()
        await self.session.close()


class UpstreamUnreachable(Exception):
    """The runtime refused or dropped the connection before answering."""


async def forward(request: web.Request, run: RuntimeRun, path: str,
                  connections: RuntimeConnections) -> web.StreamResponse:
    """Send ``request`` to ``run`` at ``/path`` and stream the answer back."""
    body = await request.read()
    request_id = request.headers.get("X-Request-Id")
    target = connections.upstream(run)
    query = request.rel_url.raw_query_string
    path_qs = f"/{path}?{query}" if query else f"/{path}"
    label = f"request {request_id or '-'} to {request.match_info.get('id', run.endpoint)}"
    try:
        return await relay(request, target, path_qs, body, record=Record(), log=_LOGGER, label=label,
                           request_id=request_id)
    except Unreachable as exc:
        raise UpstreamUnreachable(f"the runtime at {run.endpoint} did not answer: {exc}") from exc
