"""``GET /api/prometheus/targets``: the fleet for Prometheus' HTTP service discovery.

The answer is HTTP SD's JSON, a list of target groups ``{"targets": ["host:port"], "labels": {...}}``:
the daemon itself (its ``/metrics``: the router, every model's queue, every node's and GPU's
figures, labelled by node), and one group per node, at its host on the node exporter's port
(9100 unless ``?node_exporter_port=N``): the agents serve no Prometheus text of their own (they
speak mutual TLS to the daemon only), so a machine's kernel-level figures come from
prometheus-node-exporter where it is installed. The labels are ``role`` (``daemon`` or ``node``),
and for a node ``node`` (its id, as on the daemon's series) and ``node_name``.

It is an admin route: Prometheus sends the admin token from a file, e.g.::

    http_sd_configs:
      - url: http://daemon-host:8080/api/prometheus/targets
        authorization: {type: Bearer, credentials_file: /path/to/mirbadllm/admin-token}

The daemon's own target is the address Prometheus reached it at (the request's Host).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from daemon.api.nodes import NodeView
from daemon.errors import DaemonProblem, query_int
from daemon.nodes.store import format_address, parse_address

NODE_EXPORTER_PORT = 9100


class PrometheusTargets:
    def __init__(self, views: Callable[[], list[NodeView]]) -> None:
        """``views``: every node, this machine's included (``NodeManager.views``)."""
        self._views = views

    async def targets(self, request: web.Request) -> web.Response:
        port = query_int(request, "node_exporter_port", NODE_EXPORTER_PORT)
        if not 0 < port < 65536:
            raise DaemonProblem(400, "invalid_parameter", "'node_exporter_port' must be a port (1-65535)")
        here = request.url.host or "127.0.0.1"
        groups: list[dict[str, object]] = [{"targets": [request.host], "labels": {"role": "daemon"}}]
        for view in self._views():
            host = here if view.local or not view.address else parse_address(view.address)[0]
            groups.append({"targets": [format_address(host, port)],
                           "labels": {"role": "node", "node": view.id, "node_name": view.name}})
        return web.json_response(groups)
