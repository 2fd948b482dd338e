"""Model lifecycle on the master: start / stop / restart, starts on request, auto-start and relaunch.

The agents own the processes. ``Orchestrator`` holds the commands: it turns a ``ModelDefinition``
into a ``LaunchSpec`` and sends it to the node's agent through that node's start lane. What a model's
state is belongs to ``daemon.models.states`` (``ModelStates``, the one owner: status, flags, the
state last published); room is planned by ``daemon.models.room`` (``RoomPlanner``: unload idle models
on a start on request; the node of a model placed ``auto``). A llama.cpp model that names
``rpc_nodes`` runs across nodes: its helpers' rpc-servers start first and stop with it
(``daemon.models.rpc``). A node whose agent comes back gets its models started again (``relaunch_on``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from agent.api.backends import BackendChoice
from agent.api.client import AgentError
from agent.api.models import InstanceInfo, LaunchSpec
from agent.api.rpc import RpcPeer
from agent.api.runtimes import SETTINGS_FIELDS, profile
from daemon.api.models import AUTO_NODE, ModelDefinition, ModelState, ModelStatus
from daemon.events import EventBus
from daemon.models import placement
from daemon.models.external import ExternalEndpoints
from daemon.models.maintenance import Maintenance
from daemon.models.registry import Registry, RegistryError
from daemon.models.restarts import RestartBook
from daemon.models.room import (
    FIRST_CONTACT_S,
    ROOM_ATTEMPTS,
    InFlight,
    OrchestratorError,
    RoomPlanner,
)
from daemon.models.rpc import RpcHelpers
from daemon.models.states import ModelStates, StateListener
from daemon.nodes.agent_errors import agent_problem
from daemon.nodes.links import AgentLink, Links

_LOGGER = logging.getLogger(__name__)

__all__ = ["InFlight", "Orchestrator", "OrchestratorError", "StateListener"]


class Orchestrator:
    def __init__(self, registry: Registry, events: EventBus, book: RestartBook, links: Links,
                 backend_of: Callable[[str], BackendChoice] = lambda _node: "auto",
                 maintenance: Maintenance | None = None) -> None:
        self.registry = registry
        self._backend_of = backend_of  # a node's backend choice (daemon.nodes.backends), sent with each launch
        self.events = events
        self.book = book
        self._links = links
        self.external = ExternalEndpoints()  # runtime "external": no agent, a probed endpoint
        self.rpc = RpcHelpers(links, lambda: registry.known_nodes() if registry.known_nodes else {})  # across nodes
        self.maintenance = maintenance  # the jobs' windows (daemon.models.maintenance): a job's model refuses a Start
        self.states = ModelStates(registry, events, book, links, self.external, self.rpc, maintenance)
        self.room = RoomPlanner(registry, links, self.states, self.rpc, events, backend_of, self.stop)
        self._ready_waits: dict[str, asyncio.Task[ModelStatus]] = {}
        self._online: dict[str, bool] = {}  # node id -> online at its agent's last report (a return relaunches)
        self._relaunches: set[asyncio.Task[None]] = set()
        # What the views and the router read, from the one owner of a model's state:
        states = self.states
        self.on_state_change = states.on_change
        self.touch, self.last_used = states.touch, states.last_used
        self.stalled, self.decoded, self.answered = states.stalled, states.decoded, states.answered
        self.node_of, self.placed, self.instance, self.where = states.node_of, states.placed, states.instance, states.where
        self.status, self.status_by_id, self.all_statuses = states.status, states.status_by_id, states.all_statuses
        self.named, self.forget_refusal, self.wait_settled = states.named, states.forget_refusal, states.wait_settled

    def on_instances(self, node_id: str, _instances: dict[str, InstanceInfo]) -> None:
        """An agent reported: publish the state changes of that node's models; a node back online
        (a reboot, an agent restart, the network's return) gets its models started again."""
        link = self._links.get(node_id)
        online = link is not None and link.online
        if online and self._online.get(node_id) is False:
            task = asyncio.get_running_loop().create_task(self.relaunch_on(node_id))
            self._relaunches.add(task)
            task.add_done_callback(self._relaunches.discard)
        self._online[node_id] = online
        self.states.settle_node(node_id)

    async def watch_external(self) -> None:
        """Probe the external models' endpoints in the background (``daemon.models.external``)."""
        await self.external.watch(self.registry.all, self.states.external_changed)

    # --- actions -------------------------------------------------------------------------------
    async def _link(self, definition: ModelDefinition) -> AgentLink:
        node = self.node_of(definition) or definition.node
        link = self._links.get(node)
        if link is None:
            raise OrchestratorError(409, "node_unknown", f"model '{definition.id}' is placed on unknown node "
                                    f"'{node}'")
        if not link.first_sync.is_set():  # the daemon just started: give its agent a moment
            try:
                await asyncio.wait_for(link.first_sync.wait(), FIRST_CONTACT_S)
            except TimeoutError:
                pass
        if not link.online:
            raise OrchestratorError(503, "node_offline", f"node '{node}' is offline: {link.last_error}")
        return link

    @staticmethod
    def launch_spec(definition: ModelDefinition, force: bool = False,
                    rpc_peers: list[RpcPeer] | None = None, backend: BackendChoice = "auto") -> LaunchSpec:
        return LaunchSpec(backend=backend, instance_id=definition.id, runtime=definition.runtime, model_path=definition.model_path,
                          served_name=definition.served_name, image=definition.image,
                          **{field: getattr(definition, field) for field in SETTINGS_FIELDS},
                          runtime_version=definition.runtime_version,
                          extra_args=definition.extra_args, env=definition.env,
                          startup_timeout_s=definition.startup_timeout_s, force=force,
                          adapters=definition.adapters, rpc_peers=rpc_peers or [],
                          memory_budget_bytes=None if definition.memory_budget_gib is None
                          else int(definition.memory_budget_gib * (1 << 30)))

    async def start(self, model_id: str, *, by_user: bool = True, force: bool = False,
                    in_flight: InFlight | None = None) -> ModelStatus:
        """Start a model. A start by the user also clears its crash count and restart pause.
        With ``in_flight`` (a start on request), idle models of its node are unloaded to make room."""
        definition = self.registry.require(model_id)
        if not profile(definition.runtime).on_node:  # nothing to start: ask the endpoint now
            await self.external.probe(definition)
            self.states.external_changed(definition)
            return self.status(definition)
        window = self.maintenance.get(model_id) if self.maintenance is not None else None
        if by_user and window is not None:  # the job restores it when it ends
            raise window.start_refusal()
        if by_user:
            self.book.clear(model_id)
        self.states.starting(model_id)
        self.book.want(model_id, True)
        if definition.node == AUTO_NODE and self.status(definition).state not in (ModelState.STARTING,
                                                                                  ModelState.READY):
            self.states.place(model_id, await self.room.choose_node(definition, in_flight))
        link = await self._link(definition)
        # A node that reports its runtime unavailable is refused before the agent is asked.
        self.registry.check_runtime(definition, status=409)
        async with link.start_lane:
            current = self.status(definition)
            if current.state in (ModelState.STARTING, ModelState.READY):
                return current
            if in_flight is not None:
                await self.room.make_room(definition, link, in_flight)
            peers = await self.room.open_helpers(definition, link, in_flight) if definition.rpc_nodes else []
            for attempt in range(1, ROOM_ATTEMPTS + 1):
                try:
                    await link.client.start(self.launch_spec(definition, force, peers,
                                                             self._backend_of(link.node_id)))
                    break
                except AgentError as exc:
                    short = placement.shortfall_from_refusal(exc.details) \
                        if exc.code == "insufficient_memory" and in_flight is not None else None
                    if short is None or in_flight is None or attempt == ROOM_ATTEMPTS:
                        if peers:  # a failed start leaves no rpc-server behind
                            await self.rpc.close(definition)
                        self._start_refused(definition, link.node_id, exc)
                        raise agent_problem(exc, OrchestratorError) from exc
                    await self.room.make_room(definition, link, in_flight, shortfall=short)
            await link.refresh()
        self.states.started(model_id)
        return self.status(definition)

    def _start_refused(self, definition: ModelDefinition, node_id: str, exc: AgentError) -> None:
        """The node refused the start (its agent answered, with a reason): the model shows as failed
        with it, in every view and as a notice, and is not wanted running, so nothing retries it."""
        if exc.status in (0, 502, 503, 504):  # the node did not answer: offline, not a refusal
            return
        self.states.refused(definition, node_id, exc.message)

    async def stop(self, model_id: str, *, keep_wanted: bool = False) -> ModelStatus:
        definition = self.registry.require(model_id)
        if not profile(definition.runtime).on_node:  # nothing runs here to stop
            return self.status(definition)
        if not keep_wanted:
            self.book.want(model_id, False)
        if self.node_of(definition) is None:  # placed "auto" and on no node: nothing runs
            return self.status(definition)
        try:
            link = await self._link(definition)
            try:
                await link.client.stop(model_id)
            except AgentError as exc:
                if exc.status != 404:
                    raise agent_problem(exc, OrchestratorError) from exc
            await link.refresh()
        finally:
            if definition.rpc_nodes:  # the helpers' rpc-servers stop with it
                await self.rpc.close(definition)
        return self.status(definition)

    async def restart(self, model_id: str) -> ModelStatus:
        await self.stop(model_id)
        return await self.start(model_id)

    async def ensure_ready(self, model_id: str, in_flight: InFlight | None = None) -> ModelStatus:
        """Start a model on request and wait for it; concurrent callers share one start. With
        ``in_flight`` (the router's), idle models of its node are unloaded when it needs the room."""
        task = self._ready_waits.get(model_id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._start_and_wait(model_id, in_flight))
            self._ready_waits[model_id] = task
        return await asyncio.shield(task)

    async def _start_and_wait(self, model_id: str, in_flight: InFlight | None = None) -> ModelStatus:
        definition = self.registry.require(model_id)
        status = self.status(definition)
        if status.state != ModelState.READY:
            if status.state != ModelState.STARTING:
                status = await self.start(model_id, in_flight=in_flight)
            status = await self.wait_settled(model_id, definition.startup_timeout_s + 5)
        return status

    async def auto_start(self) -> None:
        """After boot: start each auto-start model that is not running, one at a time per node and
        the nodes in parallel, so a node that is offline or slow to load holds up only its own."""
        by_node: dict[str, list[ModelDefinition]] = {}
        for definition in self.registry.all():
            if definition.auto_start and (definition.node in self._links or definition.node == AUTO_NODE):
                by_node.setdefault(definition.node, []).append(definition)
        await asyncio.gather(*(self._auto_start_node(models) for models in by_node.values()))

    async def relaunch_on(self, node_id: str) -> None:
        """A node's agent is back: start again, one at a time as at boot, the models meant to run
        there (running before and not stopped by hand, restarts not paused) and its auto-start ones.
        Models it kept running (its agent restarted and adopted them) are left as they are."""
        models = [d for d in self.registry.all()
                  if (d.node == node_id or (d.node == AUTO_NODE and self.states.placed_on(d.id) == node_id))
                  and profile(d.runtime).on_node and d.id not in self.book.pauses
                  and (d.auto_start or d.id in self.book.wanted)]
        if models:
            _LOGGER.info("node %s is back: starting %s again", node_id[:12], ", ".join(d.id for d in models))
            await self._auto_start_node(models, by_user=False)

    async def _auto_start_node(self, definitions: list[ModelDefinition], *, by_user: bool = True) -> None:
        for definition in definitions:
            link = self._links.get(definition.node)
            if link is None and definition.node != AUTO_NODE:
                return
            if link is not None:  # "auto" waits for its nodes in start
                await link.first_sync.wait()
            if self.status(definition).state in (ModelState.STOPPED, ModelState.FAILED):
                try:
                    _LOGGER.info("auto-starting %s", definition.id)
                    await self.start(definition.id, by_user=by_user)
                    await self.wait_settled(definition.id, definition.startup_timeout_s + 5)
                except (OrchestratorError, RegistryError) as exc:
                    _LOGGER.error("auto-start of %s failed: %s", definition.id, exc)
