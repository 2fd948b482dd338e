"""One llama.cpp model across nodes: the helpers' rpc-servers of each model that names ``rpc_nodes``.

The orchestrator starts such a model in two steps: ``RpcHelpers.open`` asks each helper node's
agent for an rpc-server (``agent.api.rpc``: a grant naming the main node's id, so only the main
agent may reach it through the helper's tunnel), then the main node's agent gets the launch spec
with one ``RpcPeer`` per helper. ``close`` stops them again: when the model stops, when its start
fails, and before a new start (a crashed main leaves its helpers' servers running). After a
daemon restart the grants are found again on the helpers by their names (``<model id>-<12 hex>``).
Each grant may lend a size (``RpcServerRequest.memory_bytes``, which the helper checks):
``lent`` says it, what the model holds on that helper when room is made there.
The main may be this machine's own agent (``local``): its grants name the id of the certificate
the daemon wrote for it (``identify``), which it presents to the helpers' tunnels.

A helper whose node goes offline makes the model not ready: ``problem`` names it, the status
shows it (``daemon.api.rpc_split.RpcHelper``), and the orchestrator's state event carries it.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.api.client import AgentError
from agent.api.rpc import (
    NODE_ID_PATTERN,
    RpcPeer,
    RpcServerInfo,
    RpcServerRequest,
    RpcServerState,
)
from daemon.api.models import ModelDefinition
from daemon.api.rpc_split import RpcHelper
from daemon.errors import DaemonProblem
from daemon.nodes.agent_errors import agent_problem
from daemon.nodes.links import AgentLink, Links

_LOGGER = logging.getLogger(__name__)
_GRANT_TAIL = re.compile(r"^[0-9a-f]{12}$")
_NODE_ID = re.compile(NODE_ID_PATTERN)


class HelperRefused(DaemonProblem):
    """A helper's rpc-server could not be started (its node offline, its agent refused). ``node``
    and ``short``: the helper that refused its grant for memory, and by how much it fell short."""

    node: str | None = None
    short: int | None = None


def grant_id(model_id: str) -> str:
    """A new grant's id: the model's id and 12 random hex digits."""
    return f"{model_id}-{secrets.token_hex(6)}"


def grant_of(model_id: str, grant: str) -> bool:
    """Whether ``grant`` is one of ``model_id``'s grants (``grant_id``'s shape)."""
    head, _, tail = grant.rpartition("-")
    return head == model_id and bool(_GRANT_TAIL.match(tail))


@dataclass
class Grant:
    node: str
    grant_id: str
    info: RpcServerInfo | None = None
    error: str | None = None
    memory: int | None = None  # what the grant lends (RpcServerRequest.memory_bytes); None: not said


class RpcHelpers:
    """The open grants of each model across nodes, by model id."""

    def __init__(self, links: Links, names: Callable[[], Mapping[str, str]] = dict) -> None:
        self._links = links
        self._names = names  # node id -> name, for the messages
        self._grants: dict[str, list[Grant]] = {}
        self._certified: dict[str, str] = {}  # node -> its certificate's id, where the daemon names it otherwise

    def identify(self, node: str, certificate_id: str) -> None:
        """The id ``node``'s agent certificate gives it (SHA-256, DER), where the daemon's node id is
        another (``local``, this machine's agent): the id a helper's grant names when it is the main."""
        self._certified[node] = certificate_id

    def _name(self, node: str) -> str:
        return self._names().get(node) or node

    def name(self, node: str) -> str:
        """The node's name, for messages (its id when it has none)."""
        return self._name(node)

    def _online(self, node: str) -> AgentLink:
        link = self._links.get(node)
        if link is None:
            raise HelperRefused(409, "node_unknown", f"helper node '{self._name(node)}' is unknown")
        if not link.online:
            raise HelperRefused(503, "node_offline", f"helper node '{self._name(node)}' is offline"
                                + (f": {link.last_error}" if link.last_error else ""))
        return link

    async def open(self, definition: ModelDefinition, main_node: str,
                   memory: Mapping[str, int | None] | None = None) -> list[RpcPeer]:
        """Start an rpc-server on each helper for ``definition`` running on ``main_node``; the peers
        of its launch spec. ``memory``: what each helper's grant lends (its agent refuses the grant
        when it has less free). On a refusal the servers already started are stopped and it raises."""
        links = [self._online(node) for node in definition.rpc_nodes]  # all answer, or nothing changes
        peer_id = self._certified.get(main_node, main_node)
        if not _NODE_ID.match(peer_id):
            raise HelperRefused(409, "main_unidentified", f"node '{self._name(main_node)}' has no agent certificate "
                                "the helpers could check, so it cannot be a model's main node")
        await self.close(definition)
        opened: list[Grant] = []
        self._grants[definition.id] = opened
        try:
            for link in links:
                grant = Grant(link.node_id, grant_id(definition.id), memory=(memory or {}).get(link.node_id))
                opened.append(grant)
                grant.info = await link.client.start_rpc_server(
                    RpcServerRequest(grant_id=grant.grant_id, peer_node_id=peer_id, memory_bytes=grant.memory))
        except AgentError as exc:
            opened[-1].error = exc.message
            node = opened[-1].node
            await self.close(definition, keep_failed=True)
            refused = agent_problem(exc, HelperRefused,
                                    about=f"helper node '{self._name(node)}' could not start its rpc-server")
            details = exc.details or {}
            wanted, free = details.get("wanted_bytes"), details.get("free_bytes")
            if exc.code == "insufficient_memory" and isinstance(wanted, int) and isinstance(free, int) and wanted > free:
                refused.node, refused.short = node, wanted - free
            raise refused from exc
        return [RpcPeer(agent_url=link.client.base_url, grant_id=g.grant_id, node_id=self._certified.get(g.node, g.node),
                        devices=max(1, len(g.info.devices)) if g.info else 1)
                for link, g in zip(links, opened, strict=True)]

    async def close(self, definition: ModelDefinition, *, keep_failed: bool = False) -> None:
        """Stop the model's rpc-servers (those this daemon opened, else those its helpers list
        under the model's name); a helper that cannot be reached is logged (its agent stops its
        servers when it stops)."""
        grants = self._grants.pop(definition.id, None)
        if grants is None:
            grants = await self._found(definition)
        for grant in grants:
            if grant.info is None:
                continue
            link = self._links.get(grant.node)
            if link is None:
                continue
            try:
                await link.client.stop_rpc_server(grant.grant_id)
            except AgentError as exc:
                if exc.status != 404:
                    _LOGGER.warning("rpc-server %s on node %s not stopped: %s", grant.grant_id, grant.node[:12],
                                    exc.message)
        if keep_failed:
            self._grants[definition.id] = [g for g in grants if g.error is not None]

    async def _found(self, definition: ModelDefinition) -> list[Grant]:
        """The model's grants its helpers hold (a daemon restarted since it opened them)."""
        found: list[Grant] = []
        for node in definition.rpc_nodes:
            link = self._links.get(node)
            if link is None or not link.online:
                continue
            try:
                servers = await link.client.rpc_servers()
            except AgentError as exc:
                _LOGGER.info("rpc-servers of node %s not listed: %s", node[:12], exc.message)
                continue
            found += [Grant(node, s.grant_id, s, memory=s.memory_bytes) for s in servers
                      if grant_of(definition.id, s.grant_id) and s.state == RpcServerState.READY]
        return found

    def lent(self, model_id: str, node: str) -> int | None:
        """The memory ``model_id``'s open grant on helper ``node`` lends; None: no such grant, or not said."""
        return next((g.memory for g in self._grants.get(model_id, [])
                     if g.node == node and g.info is not None and g.error is None), None)

    def problem(self, definition: ModelDefinition) -> tuple[str, str] | None:
        """The first helper that makes the model not ready now (its node, why), else None."""
        for node in definition.rpc_nodes:
            link = self._links.get(node)
            if link is None:
                return node, f"helper node '{self._name(node)}' is unknown"
            if not link.online:
                return node, f"helper node '{self._name(node)}' is offline" + (
                    f": {link.last_error}" if link.last_error else "")
        return None

    def helpers(self, definition: ModelDefinition, running: bool) -> list[RpcHelper]:
        """Each helper as the status shows it, ``running``: the main instance starts or is ready."""
        grants = {g.node: g for g in self._grants.get(definition.id, [])}
        shown: list[RpcHelper] = []
        for node in definition.rpc_nodes:
            grant = grants.get(node)
            link = self._links.get(node)
            if link is None or not link.online:
                state = "offline"
            elif grant is not None and grant.error is not None:
                state = "failed"
            elif running:
                state = "ready"
            else:
                state = "stopped"
            error = grant.error if grant is not None and grant.error else (
                None if link is None or link.online else link.last_error)
            shown.append(RpcHelper(node=node, state=state, grant_id=grant.grant_id if grant and running else None,
                                   error=error))  # type: ignore[arg-type]
        return shown
