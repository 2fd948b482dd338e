"""The admin API of the daemon's services whitelist: ``services.json`` edited from the app or ``ctl``.

    GET  /api/services/policy               -> ServicesPolicy   # the whole file, with the deny list
    PUT  /api/services/policy               -> ServicesPolicy   # body: ServiceNames, every node's block
    GET  /api/nodes/{id}/services/policy    -> ServicesPolicy   # ``nodes`` holds only this node
    PUT  /api/nodes/{id}/services/policy    -> ServicesPolicy   # body: ServiceNames, this node's block

A PUT replaces one block. Names are normalised as the agent compares them (``normalise``) and
de-duplicated; a name no service manager uses is 422 ``service_invalid_name``; one on the deny list
compiled into every agent is 422 ``service_denied`` (it could never be managed, so it is never
stored); a file that cannot be read is 409 ``services_policy_unreadable`` (a hand edit is never
overwritten). Every change is audited (``service.policy``, subject ``*`` or the node id, the block
before and after); a PUT that changes nothing records nothing. Edits are serialised here; the
agents see them with the next request (``daemon.services.policy.names_for`` reads per request).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from daemon.api.services import (
    DENIED,
    INVALID_NAME,
    POLICY_UNREADABLE,
    ServiceNames,
    ServicesPolicy,
    deny_match,
    normalise,
    valid_service_name,
)
from daemon.audit.log import Recorder
from daemon.errors import DaemonProblem, json_response, read_body
from daemon.nodes.links import Links
from daemon.services.policy_store import PolicyUnreadable, read_policy, write_names

MAX_BODY = 64 * 1024
ALL_NODES = "*"  # the audit subject of every node's block


def clean(names: list[str], field: str) -> list[str]:
    """``names`` normalised and de-duplicated, in order; 422 on the first one that may not be stored."""
    kept: list[str] = []
    for raw in names:
        if not raw.strip():
            continue
        if not valid_service_name(raw.strip()):
            raise DaemonProblem(422, INVALID_NAME, f"{field}: {raw[:80]!r} is not a service name")
        pattern = deny_match([raw])
        if pattern is not None:
            raise DaemonProblem(422, DENIED, f"{field}: {normalise(raw)} is a system service MirbadLLM can never "
                                f"manage (deny list: {pattern}); it cannot be whitelisted or protected")
        key = normalise(raw)
        if key not in kept:
            kept.append(key)
    return kept


def _change(before: ServiceNames, after: ServiceNames) -> str:
    parts = []
    for field in ("allow", "protected"):
        old, new = getattr(before, field), getattr(after, field)
        parts += [f"{field} +{n}" for n in new if n not in old] + [f"{field} -{n}" for n in old if n not in new]
    return ", ".join(parts)


class ServicesPolicyApi:
    def __init__(self, links: Links, audit: Recorder, policy_file: Path) -> None:
        self._links = links
        self._audit = audit
        self._file = policy_file
        self._lock = asyncio.Lock()

    def _node(self, request: web.Request) -> str | None:
        node = request.match_info.get("id")
        if node is not None and node not in self._links:
            raise DaemonProblem(404, "node_unknown", f"no node '{node[:80]}'")
        return node

    def _answer(self, policy: ServicesPolicy, node: str | None) -> ServicesPolicy:
        if node is None:
            return policy
        return policy.model_copy(update={"nodes": {node: policy.nodes[node]} if node in policy.nodes else {}})

    async def get_policy(self, request: web.Request) -> web.Response:
        node = self._node(request)
        return json_response(self._answer(read_policy(self._file), node))

    async def put_policy(self, request: web.Request) -> web.Response:
        node = self._node(request)
        body = await read_body(request, ServiceNames, MAX_BODY)
        wanted = ServiceNames(allow=clean(body.allow, "allow"), protected=clean(body.protected, "protected"))
        async with self._lock:
            current = read_policy(self._file)
            if current.error is not None:
                raise DaemonProblem(409, POLICY_UNREADABLE, current.error)
            before = current.names(node)
            if before == wanted:
                return json_response(self._answer(current, node))
            try:
                after = write_names(self._file, node, wanted)
            except PolicyUnreadable as exc:  # changed by hand since it was read
                raise DaemonProblem(409, POLICY_UNREADABLE, f"{self._file.name} is unreadable ({exc})") from None
            except OSError as exc:
                raise DaemonProblem(500, "services_policy_write_failed",
                                    f"could not write {self._file.name}: {exc.strerror or exc}") from None
        await self._audit.record("service.policy", node or ALL_NODES, before=before, after=wanted,
                                 detail=_change(before, wanted))
        return json_response(self._answer(after, node))
