"""Handlers of the nodes part of the admin API (admin token required); the routes are in ``daemon.routes``.

    GET    /api/nodes                          -> list[NodeView]
    GET    /api/nodes/discovered               -> list[DiscoveredNode]
    POST   /api/nodes/discovered               -> NodeAddResult     # body: NodeAddressRequest
    POST   /api/nodes/pair                     -> NodeView          # body: NodePairRequest; 201
    GET    /api/nodes/{id}                     -> NodeView
    DELETE /api/nodes/{id}                     -> 204
    GET    /api/nodes/{id}/gpus/{gpu}/history  -> HistorySeries     # ?range=5m|1h|24h|7d

The pairing code arrives in one request body, is handed to ``daemon.nodes.pairing`` as a ``SecretStr``
and is never logged, stored, audited or echoed in an error.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from daemon.api.nodes import NodeAddressRequest, NodePairRequest
from daemon.errors import DaemonProblem, M, json_response, read_json, validated
from daemon.telemetry import gpu_subject

if TYPE_CHECKING:
    from daemon.server import Daemon

_LOGGER = logging.getLogger(__name__)

MAX_NODES_BODY = 64 * 1024
RANGES = ("5m", "1h", "24h", "7d")


async def _body(request: web.Request, contract: type[M]) -> M:
    # Field names and pydantic's messages only: never the input, which may hold the code.
    return validated(contract, await read_json(request, MAX_NODES_BODY))


class NodesApi:
    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon

    async def list_nodes(self, request: web.Request) -> web.Response:
        return json_response(self.d.nodes.views())

    async def discovered(self, request: web.Request) -> web.Response:
        return json_response(self.d.nodes.discovered())

    async def add_address(self, request: web.Request) -> web.Response:
        body = await _body(request, NodeAddressRequest)
        assert isinstance(body, NodeAddressRequest)
        return json_response(await self.d.nodes.add_address(body.address))

    async def pair(self, request: web.Request) -> web.Response:
        body = await _body(request, NodePairRequest)
        assert isinstance(body, NodePairRequest)
        return json_response(await self.d.nodes.pair(body), status=201)

    async def get_node(self, request: web.Request) -> web.Response:
        return json_response(self.d.nodes.view(request.match_info["id"]))

    async def remove(self, request: web.Request) -> web.Response:
        await self.d.nodes.remove(request.match_info["id"])
        return web.Response(status=204)

    async def gpu_history(self, request: web.Request) -> web.Response:
        node = self.d.nodes.view(request.match_info["id"])
        wanted = request.match_info["gpu"]
        gpu = next((g for g in node.gpus if wanted in (g.uuid, str(g.index))), None)
        if gpu is None:
            raise DaemonProblem(404, "gpu_not_found", f"node '{node.name}' has no GPU '{wanted}'")
        range_ = request.query.get("range", "5m")
        if range_ not in RANGES:
            raise DaemonProblem(400, "invalid_parameter", "range must be one of 5m, 1h, 24h, 7d")
        return json_response(await self.d.history.series("gpu", gpu_subject(node.id, gpu), range_))  # type: ignore[arg-type]
