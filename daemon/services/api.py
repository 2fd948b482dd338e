"""The admin API of host services: each node's OS services, through that node's agent.

    GET  /api/nodes/{id}/services                    -> ServicesList         # ?all=0|1
    POST /api/nodes/{id}/services/{name}/{action}    -> ServiceActionResult  # start|stop|restart; body: ServiceActionBody

The agent decides what may be done (its deny list, whitelist and protected names,
``agent.services.policy``); the daemon adds the names of its own ``services.json``
(``daemon.services.policy``) and records every action and every refusal, whoever refused it, in the
audit log (``daemon.audit``: ``service.start|stop|restart``, subject ``NODE/NAME``, the service after).
Refusals keep the agent's status and code (403 ``service_denied``, ``service_not_whitelisted``,
``service_confirm_required``; 404 ``service_not_found``; 502 ``service_action_failed``), as
``daemon.nodes.agent_errors`` answers every failure of an agent.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from agent.api.client import AgentError
from agent.api.service_names import valid_service_name
from agent.api.services import SERVICE_ACTIONS, ServiceActionRequest
from daemon.api.services import ServiceActionBody
from daemon.audit.log import Recorder
from daemon.errors import DaemonProblem, json_response, read_body
from daemon.nodes.agent_errors import agent_problem
from daemon.nodes.links import Links
from daemon.services.policy import names_for

MAX_BODY = 16 * 1024


class ServicesApi:
    def __init__(self, links: Links, audit: Recorder, policy_file: Path) -> None:
        self._links = links
        self._audit = audit
        self._policy_file = policy_file

    async def list_services(self, request: web.Request) -> web.Response:
        node = request.match_info["id"]
        client = self._links.online_client(node)
        names = names_for(self._policy_file, node)
        every = request.query.get("all", "0") not in ("0", "", "false")
        return json_response(await client.services(every, names.allow, names.protect))

    async def act(self, request: web.Request) -> web.Response:
        node, name, action = request.match_info["id"], request.match_info["name"], request.match_info["action"]
        if action not in SERVICE_ACTIONS:
            raise DaemonProblem(404, "unknown_action", f"no service action '{action[:40]}': start, stop or restart")
        body = await read_body(request, ServiceActionBody, MAX_BODY, empty={})
        subject = f"{node}/{name}"
        if not valid_service_name(name):  # as the agent would answer, before its URL is built
            await self._audit.record(f"service.{action}", subject[:300], detail="refused (service_invalid_name)")
            raise DaemonProblem(422, "service_invalid_name", f"'{name[:80]}' is no service name")
        try:
            client = self._links.online_client(node)
        except DaemonProblem as exc:
            await self._audit.record(f"service.{action}", subject, detail=f"refused ({exc.code}): {exc.message}")
            raise
        names = names_for(self._policy_file, node)
        try:
            result = await client.service_action(name, action, ServiceActionRequest(
                confirm=body.confirm, allow=names.allow, protect=names.protect))
        except AgentError as exc:
            verdict = "failed" if exc.status in (0, 502) or exc.status >= 500 else "refused"
            await self._audit.record(f"service.{action}", subject, detail=f"{verdict} ({exc.code}): {exc.message}")
            raise agent_problem(exc) from exc
        await self._audit.record(f"service.{action}", subject, after=result.service,
                                 detail=f"ok: {result.service.state.value}")
        return json_response(result)
