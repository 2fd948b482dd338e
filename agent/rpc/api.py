"""The helper's RPC routes (``agent.api.rpc``): the daemon's rpc-server calls and the peer's tunnel.

The peer gate (``agent.rpc.peers``) has let only the daemon reach the ``/rpc/servers`` routes and
only the grant's peer reach its tunnel before any handler here runs; the tunnel asks the grant
again (it may have closed since) and then carries the peer's bytes to the rpc-server's loopback
port until either side ends or the grant closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from aiohttp import web
from pydantic import ValidationError

from agent.api.rpc import RPC_SERVERS_PATH, RpcServerRequest, RpcServersPage
from agent.problems import AgentProblem
from agent.rpc.peers import PEER, Peer, refusal
from agent.rpc.servers import RpcServers
from agent.rpc.tunnel import HEARTBEAT_S, MAX_FRAME, pipe
from agent.runtimes.ports import LOOPBACK

_LOGGER = logging.getLogger(__name__)


def tunnel_route(prefix: str) -> str:
    """The tunnel's canonical route (what the peer gate lets a peer reach)."""
    return f"{prefix}/rpc/{{grant}}/tunnel"


def routes(prefix: str, get: Callable[[web.Request], RpcServers]) -> list[web.RouteDef]:
    base = f"{prefix}{RPC_SERVERS_PATH}"

    async def start(request: web.Request) -> web.Response:
        try:
            body = RpcServerRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            raise AgentProblem(f"not a valid RpcServerRequest: {exc}", status=422, code="invalid_request") from exc
        info = await get(request).start(body)
        return web.json_response(info.model_dump(mode="json"), status=201)

    async def list_servers(request: web.Request) -> web.Response:
        return web.json_response(RpcServersPage(servers=get(request).list()).model_dump(mode="json"))

    async def one(request: web.Request) -> web.Response:
        return web.json_response(get(request).info(request.match_info["grant"]).model_dump(mode="json"))

    async def stop(request: web.Request) -> web.Response:
        info = await get(request).stop(request.match_info["grant"])
        return web.json_response(info.model_dump(mode="json"))

    async def tunnel(request: web.Request) -> web.StreamResponse:
        servers, grant = get(request), request.match_info["grant"]
        peer = request.get(PEER)
        node_id = peer.node_id if isinstance(peer, Peer) else None
        port = servers.tunnel_port(grant, node_id) if node_id is not None else None
        if port is None:
            return refusal("grant_not_open", f"no open RPC grant {grant!r} for this node")
        try:
            reader, writer = await asyncio.open_connection(LOOPBACK, port)
        except OSError as exc:
            raise AgentProblem(f"the rpc-server of grant {grant!r} does not answer: {exc}", status=502,
                               code="rpc_server_unreachable") from exc
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, autoping=True, heartbeat=HEARTBEAT_S)
        try:
            await ws.prepare(request)
        except BaseException:
            writer.close()
            raise
        carry = asyncio.ensure_future(pipe(ws, reader, writer))
        if not servers.add_tunnel(grant, carry.cancel):  # closed while we connected
            carry.cancel()
        _LOGGER.info("rpc tunnel for grant %s opened by node %s", grant, node_id[:12] if node_id else "?")
        try:
            await asyncio.wait([carry])
        finally:
            servers.remove_tunnel(grant, carry.cancel)
            if not carry.done():
                carry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await carry
        return ws

    return [
        web.get(tunnel_route(prefix), tunnel),          # WebSocket; the grant's peer only
        web.post(base, start),                          # body: RpcServerRequest -> 201 RpcServerInfo
        web.get(base, list_servers),                    # -> RpcServersPage
        web.get(f"{base}/{{grant}}", one),              # -> RpcServerInfo
        web.delete(f"{base}/{{grant}}", stop),          # -> RpcServerInfo (stopped)
    ]


def cleanup(get: Callable[[web.Application], RpcServers | None]) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context: stop what an earlier agent left running at start; every rpc-server at exit."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        servers = get(app)
        if servers is not None:
            await asyncio.to_thread(servers.reap_leftovers)
        yield
        if servers is not None:
            await servers.close()

    return ctx
