"""Room planning on the master: what a model will take, and which idle models to unload for it.

``RoomPlanner`` asks a node's agent what a model will take (its GGUF header's estimate, cached by
definition), gathers the other models loaded there as ``daemon.models.placement`` sees them, and
unloads the plan's victims through the orchestrator's stop, each a ``model.evicted`` event; a model
across nodes has room made on its main and on each helper at once (``daemon.models.split_room``). It
also chooses the node of a model placed ``auto`` (``placement.choose_node``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from agent.api.backends import BackendChoice
from agent.api.client import AgentError
from agent.api.models import AgentStatus, InstanceState, TelemetrySample
from agent.api.rpc import RpcPeer
from agent.api.runtimes import profile
from agent.api.sources import FitRequest
from daemon.api.models import ModelDefinition
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.models import placement, split_room
from daemon.models.registry import Registry, RegistryError, definition_hash
from daemon.models.rpc import HelperRefused, RpcHelpers
from daemon.models.states import ModelStates
from daemon.nodes.links import AgentLink, Links

_LOGGER = logging.getLogger(__name__)

FIRST_CONTACT_S = 30.0  # after the daemon's start: how long a first report of a node's agent is awaited
ROOM_ATTEMPTS = 3  # plans per start: ours, then up to two more from the agent's own refusal

InFlight = Callable[[str], int]  # requests in flight or waiting, by served name (the router's)


class OrchestratorError(DaemonProblem):
    """A start, stop or restart refused: no room for it (503 with what uses the memory), no node to
    place it on, its node unknown or offline, its agent's refusal (``daemon.nodes.agent_errors``)."""


class RoomPlanner:
    def __init__(self, registry: Registry, links: Links, states: ModelStates, rpc: RpcHelpers, events: EventBus,
                 backend_of: Callable[[str], BackendChoice], stop: Callable[[str], Awaitable[object]]) -> None:
        self.registry = registry
        self._links = links
        self._states = states
        self._rpc = rpc
        self._events = events
        self._backend_of = backend_of
        self._stop = stop  # the orchestrator's stop: a victim is no longer wanted running
        self._needs: dict[tuple[str, str, str], int | None] = {}  # (model, node, config hash) -> bytes
        self._split_fits: dict[tuple[str, str, str], tuple[int | None, int | None]] = {}  # -> (main, helpers)

    async def need(self, definition: ModelDefinition, link: AgentLink) -> int | None:
        """What the model will take: its budget, else the agent's estimate from its GGUF header (none
        for a model across nodes: its main node holds only part of it)."""
        if definition.memory_budget_gib is not None:
            return int(definition.memory_budget_gib * (1 << 30))
        if not profile(definition.runtime).reads_gguf or definition.rpc_nodes:
            return None  # across nodes the file's estimate is the whole model, not the main node's part
        key = (definition.id, link.node_id, definition_hash(definition))
        if key not in self._needs:
            try:
                report = await link.client.fit(FitRequest(model_path=definition.model_path,
                                                          settings=definition.settings,
                                                          backend=self._backend_of(link.node_id)))
                self._needs[key] = report.estimate.host_bytes + sum(report.estimate.gpu_bytes)
            except AgentError as exc:  # the agent's admission will say it at start
                _LOGGER.info("no memory estimate for %s: %s", definition.id, exc.message)
                self._needs[key] = None
        return self._needs[key]

    def loaded(self, definition: ModelDefinition, link: AgentLink, in_flight: InFlight) -> list[placement.Loaded]:
        """The other models loaded or loading on ``definition``'s node, as the planner sees them."""
        sample = link.latest_sample
        states = self._states
        loaded = []
        for other in self.registry.all():
            inst = link.instances.get(other.id)
            if other.id == definition.id or states.node_of(other) != link.node_id or inst is None or \
                    inst.state not in (InstanceState.STARTING, InstanceState.READY):
                continue
            size: int | None
            if other.memory_budget_gib is not None:
                size = int(other.memory_budget_gib * (1 << 30))
            else:
                figures = sample.instances.get(other.id) if sample is not None else None
                size = None if figures is None or figures.rss_bytes is None else \
                    figures.rss_bytes + (figures.gpu_memory_bytes or 0)
            loaded.append(placement.Loaded(model_id=other.id, size_bytes=size, last_used=states.last_used(other.id, 0.0),
                                           in_flight=in_flight(other.served_name), pinned=other.pinned,
                                           model_class=other.model_class))
        for other in self.registry.all():  # models across nodes whose rpc-server this node runs as a helper
            inst = states.instance(other) if link.node_id in other.rpc_nodes and other.id != definition.id else None
            if inst is None or inst.state not in (InstanceState.STARTING, InstanceState.READY):
                continue
            loaded.append(placement.Loaded(model_id=other.id, size_bytes=self._rpc.lent(other.id, link.node_id),
                                           last_used=states.last_used(other.id, 0.0),
                                           in_flight=in_flight(other.served_name), pinned=other.pinned,
                                           model_class=other.model_class))
        return loaded

    async def make_room(self, definition: ModelDefinition, link: AgentLink, in_flight: InFlight,
                        shortfall: int | None = None) -> None:
        """Unload what the plan says, or refuse with what is using the memory (503)."""
        if definition.rpc_nodes:
            await self.make_room_across(definition, link, in_flight,
                                        None if shortfall is None else {link.node_id: shortfall})
            return
        need = await self.need(definition, link)
        if need is None and shortfall is None:
            return  # no figure to plan with: the agent's admission decides
        figures = await self.figures(link)
        if figures is None and shortfall is None:
            return
        memory = placement.NodeMemory(total=figures.memory_total if figures else 0,
                                      available=figures.memory_available if figures else 0)
        found = placement.plan(need or 0, memory, self.loaded(definition, link, in_flight),
                               definition.model_class, shortfall=shortfall)
        if not found.fits:
            raise OrchestratorError(503, "insufficient_memory", f"Not enough memory on node '{link.node_id}' "
                            f"for '{definition.id}': {found.reason}")
        for victim in found.evict:
            size = placement.gib(victim.size_bytes or 0)
            reason = f"unloaded to make room for '{definition.id}' ({placement.gib(need or shortfall or 0)} " \
                     f"needed; it was idle, class {victim.model_class}, and held {size})"
            _LOGGER.info("%s %s", victim.model_id, reason)
            self._states.evicted(victim.model_id, reason)
            self._events.publish("model.evicted", victim.model_id, for_model=definition.id,
                                 freed_bytes=victim.size_bytes, needed_bytes=need, reason=reason)
            await self._stop(victim.model_id)  # no longer wanted: start_on_request brings it back

    async def split_needs(self, definition: ModelDefinition, link: AgentLink) -> tuple[int | None, dict[str, int | None]]:
        """A model across nodes: what its main node holds (its budget, else the main agent's estimate
        of the main's share, one RPC device per helper) and what each helper's grant lends (the
        estimate's remote part, ``split_room.helper_shares``); None where it is not known."""
        key = (definition.id, link.node_id, definition_hash(definition))
        if key not in self._split_fits:
            try:
                report = await link.client.fit(FitRequest(model_path=definition.model_path, settings=definition.settings,
                                                          rpc_devices=len(definition.rpc_nodes),
                                                          backend=self._backend_of(link.node_id)))
                self._split_fits[key] = (report.estimate.host_bytes + sum(report.estimate.gpu_bytes),
                                         report.remote_bytes)
            except AgentError as exc:  # an older agent, no such file: the agents' own checks decide
                _LOGGER.info("no split estimate for %s: %s", definition.id, exc.message)
                self._split_fits[key] = (None, None)
        main, remote = self._split_fits[key]
        if definition.memory_budget_gib is not None:
            main = int(definition.memory_budget_gib * (1 << 30))
        helpers: list[int | None] = list(split_room.helper_shares(remote, definition.settings, len(definition.rpc_nodes))) \
            if remote is not None else [None] * len(definition.rpc_nodes)
        return main, dict(zip(definition.rpc_nodes, helpers, strict=True))

    async def open_helpers(self, definition: ModelDefinition, link: AgentLink,
                           in_flight: InFlight | None) -> list[RpcPeer]:
        """The helpers' rpc-servers, each grant lending its share; on a start on request a helper
        that refuses its grant for memory gets room made by its shortfall, and it is tried again."""
        lent = (await self.split_needs(definition, link))[1]
        for attempt in range(1, ROOM_ATTEMPTS + 1):
            try:
                return await self._rpc.open(definition, link.node_id, lent)
            except HelperRefused as refused:
                if in_flight is None or refused.node is None or refused.short is None or attempt == ROOM_ATTEMPTS:
                    raise
                await self.make_room_across(definition, link, in_flight, {refused.node: refused.short})
        raise AssertionError("unreachable")

    async def make_room_across(self, definition: ModelDefinition, link: AgentLink, in_flight: InFlight,
                               shortfalls: dict[str, int] | None = None) -> None:
        """Room on every node of a model across nodes (``split_room.plan_across``): its main's share on
        the main node, each helper's on its helper; all or nothing. After an agent's own refusal
        (``shortfalls``: by node, how much it missed) only that node is planned again."""
        main, helpers = await self.split_needs(definition, link)
        wanted: list[tuple[str, split_room.Role, int | None]] = [(link.node_id, "main", main)]
        wanted += [(node, "helper", helpers.get(node)) for node in definition.rpc_nodes]
        if shortfalls is not None:
            wanted = [w for w in wanted if w[0] in shortfalls]
        nodes: list[split_room.NodeNeed] = []
        for node, role, need in wanted:
            short = (shortfalls or {}).get(node)
            here = self._links.get(node)
            if (need is None and short is None) or here is None or not here.online:
                continue  # no figure to plan with, or offline (rpc.open says so): the agents decide
            figures = await self.figures(here)
            if figures is None and short is None:
                continue
            memory = placement.NodeMemory(total=figures.memory_total if figures else 0,
                                          available=figures.memory_available if figures else 0)
            nodes.append(split_room.NodeNeed(node, role, need or 0, memory,
                                             tuple(self.loaded(definition, here, in_flight)), short))
        found = split_room.plan_across(nodes, definition.model_class)
        if not found.fits:
            raise OrchestratorError(503, "insufficient_memory", f"Not enough memory on {found.role} node "
                            f"'{self._rpc.name(found.node)}' for '{definition.id}' (across nodes): {found.reason}")
        needs = {n.node: n for n in nodes}
        for eviction in found.evict:
            victim, there = eviction.victim, needs[eviction.node]
            reason = f"unloaded from {there.role} node '{self._rpc.name(eviction.node)}' to make room for " \
                     f"'{definition.id}' across nodes ({placement.gib(there.shortfall or there.need)} needed there; " \
                     f"it was idle, class {victim.model_class}, and held {placement.gib(victim.size_bytes or 0)} there)"
            _LOGGER.info("%s %s", victim.model_id, reason)
            self._states.evicted(victim.model_id, reason)
            self._events.publish("model.evicted", victim.model_id, for_model=definition.id, node=eviction.node,
                                 freed_bytes=victim.size_bytes, needed_bytes=there.need, reason=reason,
                                 freed_by_node=dict(eviction.freed))
            await self._stop(victim.model_id)  # a model across nodes stops its helpers' rpc-servers too

    @staticmethod
    async def figures(link: AgentLink) -> TelemetrySample | AgentStatus | None:
        """The node's memory figures: its latest telemetry sample, else the agent's status now."""
        if link.latest_sample is not None:
            return link.latest_sample
        try:
            return await link.client.status()
        except AgentError:
            return None

    async def choose_node(self, definition: ModelDefinition, in_flight: InFlight | None) -> str:
        """Where a model placed ``auto`` starts: the best of the online nodes that offer its runtime
        (``placement.choose_node``); only a start on request unloads models to make room there."""
        links = list(self._links)
        waiting = [link.first_sync.wait() for link in links if not link.first_sync.is_set()]
        if waiting:  # the daemon just started: give its agents a moment
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), FIRST_CONTACT_S)
        options: list[placement.NodeOption] = []
        for link in links:
            here = definition.model_copy(update={"node": link.node_id})
            try:
                self.registry.check_runtime(here, status=409)
            except RegistryError:
                continue
            figures = await self.figures(link) if link.online else None
            if figures is None:
                continue
            need = await self.need(here, link)
            memory = placement.NodeMemory(total=figures.memory_total, available=figures.memory_available)
            found = placement.plan(need or 0, memory, self.loaded(here, link, in_flight or (lambda _name: 0)),
                                   definition.model_class)
            gpu_free = sum(max(0, g.memory_total - g.memory_used) for g in figures.gpus)
            options.append(placement.NodeOption(link.node_id, found, gpu_free))
        best = placement.choose_node(options, may_evict=in_flight is not None)
        if best is not None:
            return best.node_id
        if not options:
            raise OrchestratorError(503, "node_offline", f"model '{definition.id}' is placed 'auto', and no online "
                            "node offers its runtime")
        reasons = "; ".join(f"node '{o.node_id}': {o.plan.reason or 'it would unload other models'}"
                            for o in options)
        raise OrchestratorError(503, "insufficient_memory", f"No node has the memory for '{definition.id}': {reasons}")
