"""The nodes part of the admin API (admin token required); see ``daemon.api.client`` for the table.

    GET    /api/nodes                          -> list[NodeView]
    GET    /api/nodes/discovered               -> list[DiscoveredNode]
    POST   /api/nodes/discovered               -> NodeAddResult     # body: NodeAddressRequest
    POST   /api/nodes/pair                     -> NodeView          # body: NodePairRequest; 201
    GET    /api/nodes/{id}                     -> NodeView
    DELETE /api/nodes/{id}                     -> 204
    GET    /api/nodes/{id}/gpus/{gpu}/history  -> HistorySeries     # ?range=5m|1h|24h|7d

The pairing code arrives in one request body, is handed to ``daemon.pairing`` as a ``SecretStr``
and is never logged, stored, audited or echoed in an error.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from aiohttp import web
from pydantic import BaseModel, ValidationError

from daemon.admin import Invalid
from daemon.api.nodes import NodeAddressRequest, NodePairRequest
from daemon.telemetry import gpu_subject

if TYPE_CHECKING:
    from daemon.server import Daemon

_LOGGER = logging.getLogger(__name__)

MAX_NODES_BODY = 64 * 1024
RANGES = ("5m", "1h", "24h", "7d")


def _json(model: BaseModel | list[BaseModel], status: int = 200) -> web.Response:
    if isinstance(model, list):
        text = "[" + ",".join(m.model_dump_json() for m in model) + "]"
    else:
        text = model.model_dump_json()
    return web.Response(text=text, status=status, content_type="application/json")


async def _body(request: web.Request, contract: type[BaseModel]) -> BaseModel:
    if request.content_length is not None and request.content_length > MAX_NODES_BODY:
        raise Invalid(413, "request_too_large", "Request body is too large.")
    try:
        data = json.loads(await request.read())
    except ValueError:
        raise Invalid(400, "invalid_json", "Request body is not valid JSON.") from None
    try:
        return contract.model_validate(data)
    except ValidationError as exc:
        # Field names and pydantic's messages only: never the input, which may hold the code.
        parts = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()]
        raise Invalid(422, "invalid_request", "; ".join(parts)) from None


class NodesApi:
    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/nodes", self.list_nodes),
            web.get("/api/nodes/discovered", self.discovered),
            web.post("/api/nodes/discovered", self.add_address),            # body: NodeAddressRequest
            web.post("/api/nodes/pair", self.pair),                         # body: NodePairRequest
            web.get("/api/nodes/{id}", self.get_node),
            web.delete("/api/nodes/{id}", self.remove),
            web.get("/api/nodes/{id}/gpus/{gpu}/history", self.gpu_history),  # ?range=5m|1h|24h|7d
        ]

    async def list_nodes(self, request: web.Request) -> web.Response:
        return _json(self.d.nodes.views())  # type: ignore[arg-type]

    async def discovered(self, request: web.Request) -> web.Response:
        return _json(self.d.nodes.discovered())  # type: ignore[arg-type]

    async def add_address(self, request: web.Request) -> web.Response:
        body = await _body(request, NodeAddressRequest)
        assert isinstance(body, NodeAddressRequest)
        return _json(await self.d.nodes.add_address(body.address))

    async def pair(self, request: web.Request) -> web.Response:
        body = await _body(request, NodePairRequest)
        assert isinstance(body, NodePairRequest)
        return _json(await self.d.nodes.pair(body), status=201)

    async def get_node(self, request: web.Request) -> web.Response:
        return _json(self.d.nodes.view(request.match_info["id"]))

    async def remove(self, request: web.Request) -> web.Response:
        await self.d.nodes.remove(request.match_info["id"])
        return web.Response(status=204)

    async def gpu_history(self, request: web.Request) -> web.Response:
        node = self.d.nodes.view(request.match_info["id"])
        wanted = request.match_info["gpu"]
        gpu = next((g for g in node.gpus if wanted in (g.uuid, str(g.index))), None)
        if gpu is None:
            raise Invalid(404, "gpu_not_found", f"node '{node.name}' has no GPU '{wanted}'")
        range_ = request.query.get("range", "5m")
        if range_ not in RANGES:
            raise Invalid(400, "invalid_parameter", "range must be one of 5m, 1h, 24h, 7d")
        return _json(await self.d.history.series("gpu", gpu_subject(node.id, gpu), range_))  # type: ignore[arg-type]
