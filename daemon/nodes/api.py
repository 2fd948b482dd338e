"""Handlers of the nodes part of the admin API (admin token required); the routes are in ``daemon.routes``.

    GET    /api/nodes                          -> list[NodeView]
    GET    /api/nodes/discovered               -> list[DiscoveredNode]
    POST   /api/nodes/discovered               -> NodeAddResult     # body: NodeAddressRequest
    POST   /api/nodes/pair                     -> NodeView          # body: NodePairRequest; 201
    GET    /api/nodes/{id}                     -> NodeView
    DELETE /api/nodes/{id}                     -> 204
    GET    /api/nodes/{id}/history             -> HistorySeries     # ?range=5m|1h|24h|7d
    GET    /api/nodes/{id}/gpus/{gpu}/history  -> HistorySeries     # ?range=5m|1h|24h|7d
    PUT    /api/nodes/{id}/backend             -> NodeView          # body: BackendSetting (auto|cuda|vulkan|cpu)
    POST   /api/nodes/ca-rotation              -> CaRotationResult  # 409 ca_rotation_running | pairing_in_progress

The pairing code arrives in one request body, is handed to ``daemon.nodes.pairing`` as a ``SecretStr``
and is never logged, stored, audited or echoed in an error.
"""

from __future__ import annotations

from aiohttp import web

from agent.api.backends import BackendSetting
from daemon.api.nodes import NodeAddressRequest, NodePairRequest
from daemon.audit.log import Recorder
from daemon.errors import (
    DaemonProblem,
    json_response,
    query_range,
    read_body,
)
from daemon.history import History
from daemon.nodes.ca_rotation import CaRotation
from daemon.nodes.manager import NodeManager
from daemon.telemetry import gpu_subject

MAX_NODES_BODY = 64 * 1024


class NodesApi:
    def __init__(self, nodes: NodeManager, history: History, audit: Recorder | None = None,
                 rotation: CaRotation | None = None) -> None:
        self._nodes = nodes
        self._rotation = rotation
        self._history = history
        self._audit = audit

    async def put_backend(self, request: web.Request) -> web.Response:
        """The node's backend choice; the next model started there computes on it (audited)."""
        node = request.match_info["id"]
        body = await read_body(request, BackendSetting, MAX_NODES_BODY, "invalid_backend")
        before, view = await self._nodes.set_backend(node, body.backend)
        if self._audit is not None and before != body.backend:
            await self._audit.record("node.backend", node, before=before, after=body.backend,
                                     detail=f"{before} -> {body.backend}")
        return json_response(view)

    async def rotate_ca(self, request: web.Request) -> web.Response:
        """Replace the daemon's CA on every reachable node, then retire the old one (daemon.nodes.ca_rotation)."""
        if self._rotation is None:
            raise DaemonProblem(409, "ca_rotation_unavailable", "this daemon was built without CA rotation")
        return json_response(await self._rotation.rotate())

    async def list_nodes(self, request: web.Request) -> web.Response:
        return json_response(self._nodes.views())

    async def discovered(self, request: web.Request) -> web.Response:
        return json_response(self._nodes.discovered())

    async def add_address(self, request: web.Request) -> web.Response:
        body = await read_body(request, NodeAddressRequest, MAX_NODES_BODY)
        assert isinstance(body, NodeAddressRequest)
        return json_response(await self._nodes.add_address(body.address))

    async def pair(self, request: web.Request) -> web.Response:
        body = await read_body(request, NodePairRequest, MAX_NODES_BODY)  # its errors never echo the code
        assert isinstance(body, NodePairRequest)
        return json_response(await self._nodes.pair(body), status=201)

    async def get_node(self, request: web.Request) -> web.Response:
        return json_response(self._nodes.view(request.match_info["id"]))

    async def remove(self, request: web.Request) -> web.Response:
        await self._nodes.remove(request.match_info["id"])
        return web.Response(status=204)

    async def node_history(self, request: web.Request) -> web.Response:
        return json_response(await self._history.series("node", request.match_info["id"], query_range(request)))

    async def gpu_history(self, request: web.Request) -> web.Response:
        node = self._nodes.view(request.match_info["id"])
        wanted = request.match_info["gpu"]
        gpu = next((g for g in node.gpus if wanted in (g.uuid, str(g.index))), None)
        if gpu is None:
            raise DaemonProblem(404, "gpu_not_found", f"node '{node.name}' has no GPU '{wanted}'")
        range_ = query_range(request)
        return json_response(await self._history.series("gpu", gpu_subject(node.id, gpu), range_))
