"""The agent's host-service routes, spliced into ``agent.server``'s route table.

    GET  /services                  -> ServicesList         # ?all=0|1&allow=NAME&protect=NAME (repeated)
    POST /services/{name}/{action}  -> ServiceActionResult  # action: start|stop|restart; body: ServiceActionRequest
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web
from pydantic import ValidationError

from agent.api.services import SERVICE_ACTIONS, ServiceActionRequest
from agent.problems import AgentProblem
from agent.services.service import HostServices

MAX_BODY = 64 * 1024
ServicesOf = Callable[[web.Request], HostServices]


def routes(prefix: str, services_of: ServicesOf) -> list[web.RouteDef]:
    async def list_services(request: web.Request) -> web.Response:
        every = request.query.get("all", "0") not in ("0", "", "false")
        listing = await services_of(request).list(every, request.query.getall("allow", []),
                                                  request.query.getall("protect", []))
        return web.json_response(listing.model_dump(mode="json"))

    async def act(request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action not in SERVICE_ACTIONS:
            raise AgentProblem(f"no action {action[:40]!r}: start, stop or restart", status=404,
                               code="unknown_action")
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise AgentProblem("the request body is too large", status=413, code="request_too_large")
        try:
            body = ServiceActionRequest.model_validate(json.loads(await request.read() or b"{}"))
        except (ValidationError, ValueError) as exc:
            raise AgentProblem(f"not a valid ServiceActionRequest: {exc}", status=422, code="invalid_request") from None
        result = await services_of(request).act(request.match_info["name"], action, body)
        return web.json_response(result.model_dump(mode="json"))

    return [web.get(f"{prefix}/services", list_services),
            web.post(f"{prefix}/services/{{name}}/{{action}}", act)]
