"""Model lifecycle on the master: status from the agents, start / stop / restart, waiting for ready.

The agents own the processes; this module turns a ``ModelDefinition`` into a ``LaunchSpec``, sends
it to the node's agent through that node's start lane, and derives each ``ModelStatus`` from the
definition and what the agent last reported. State changes become events. A start on request
makes room first when the node's memory is short: ``daemon.models.placement`` plans which idle
models of that node to unload, and each one unloaded is a ``model.evicted`` event. A model placed
``node: "auto"`` is placed at each start on the node where it fits best (``placement.choose_node``);
``node_of`` says where it runs now, and its status reports that node. A llama.cpp model that names
``rpc_nodes`` runs across nodes: its helpers' rpc-servers start first and stop with it
(``daemon.models.rpc``), and a helper offline makes it not ready. Room for it is made on its main
and on each helper at once (``daemon.models.split_room``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from agent.api.backends import BackendChoice
from agent.api.client import AgentError
from agent.api.models import (
    AgentStatus,
    InstanceInfo,
    InstanceState,
    LaunchSpec,
    TelemetrySample,
)
from agent.api.rpc import RpcPeer
from agent.api.runtimes import profile
from agent.api.sources import FitRequest
from daemon.api.models import AUTO_NODE, ModelDefinition, ModelState, ModelStatus
from daemon.errors import DaemonProblem
from daemon.events import EventBus
from daemon.models import placement, split_room
from daemon.models.external import ExternalEndpoints
from daemon.models.maintenance import Maintenance
from daemon.models.registry import Registry, RegistryError, definition_hash
from daemon.models.restarts import RestartBook
from daemon.models.rpc import HelperRefused, RpcHelpers
from daemon.models.speed import SpeedWatch
from daemon.nodes.agent_errors import agent_problem
from daemon.nodes.links import AgentLink, Links

_LOGGER = logging.getLogger(__name__)

FIRST_CONTACT_S = 30.0

StateListener = Callable[[str, ModelState | None, ModelStatus], None]
InFlight = Callable[[str], int]  # requests in flight or waiting, by served name (the router's)
ROOM_ATTEMPTS = 3  # plans per start: ours, then up to two more from the agent's own refusal


class OrchestratorError(DaemonProblem):
    """A start, stop or restart refused."""


class Orchestrator:
    def __init__(self, registry: Registry, events: EventBus, book: RestartBook, links: Links,
                 backend_of: Callable[[str], BackendChoice] = lambda _node: "auto") -> None:
        self.registry = registry
        self._backend_of = backend_of  # a node's backend choice (daemon.nodes.backends), sent with each launch
        self.events = events
        self.book = book
        self._links = links
        self.external = ExternalEndpoints()  # runtime "external": no agent, a probed endpoint
        self._listeners: list[StateListener] = []
        self._states: dict[str, ModelState] = {}
        self._changed = asyncio.Condition()
        self._ready_waits: dict[str, asyncio.Task[ModelStatus]] = {}
        self._last_used: dict[str, float] = {}
        self._evicted: dict[str, str] = {}  # model id -> why it was last unloaded to make room
        self._online: dict[str, bool] = {}  # node id -> online at its agent's last report (a return relaunches)
        self._relaunches: set[asyncio.Task[None]] = set()
        self.speed = SpeedWatch()  # the Slow flag, from each model's own decode speeds (daemon.models.speed)
        self._stalled: dict[str, str] = {}  # model id -> its last answer cut for silence (core.relay), until one completes
        # model id -> why its node refused its last start (a missing file, a bad argument): shown as
        # failed with that reason until it is started again or changed; never restarted as a crash
        self._refused: dict[str, str] = {}
        self.maintenance: Maintenance | None = None  # the jobs' windows (daemon.models.maintenance; set by daemon.deps)
        self._needs: dict[tuple[str, str, str], int | None] = {}  # (model, node, config hash) -> bytes
        self._split_fits: dict[tuple[str, str, str], tuple[int | None, int | None]] = {}  # -> (main, helpers)
        self._placed: dict[str, str] = {}  # model placed "auto" -> the node it was started on
        self.rpc = RpcHelpers(links, lambda: registry.known_nodes() if registry.known_nodes else {})  # across nodes

    def on_state_change(self, listener: StateListener) -> None:
        """Call ``listener(model_id, previous, status)`` on each model state change (the health monitor)."""
        self._listeners.append(listener)

    def touch(self, model_id: str) -> None:
        """The model was used now (a routed request, a benchmark): it is not idle."""
        self._last_used[model_id] = time.monotonic()

    def last_used(self, model_id: str, default: float) -> float:
        return self._last_used.get(model_id, default)

    def stalled(self, model_id: str, why: str) -> None:
        """An answer of the model was cut for silence: it shows as Stalled until one completes."""
        self._stalled[model_id] = f"{time.strftime('%H:%M:%S')}: {why}"
        self.events.publish("model.flagged", model_id, stalled=why)

    def decoded(self, model_id: str, tokens: int | None, decode_s: float | None) -> None:
        """A streamed answer completed with no other request of the model in flight: its speed."""
        if self.speed.observe(model_id, tokens, decode_s):
            self.events.publish("model.flagged", model_id, slow=self.speed.slow.get(model_id))

    def answered(self, model_id: str) -> None:
        """An answer completed: a Stalled flag goes (the hot path: one dict check when none is set)."""
        if self._stalled and self._stalled.pop(model_id, None) is not None:
            self.events.publish("model.flagged", model_id, stalled=None)

    # --- status --------------------------------------------------------------------------------
    def node_of(self, definition: ModelDefinition) -> str | None:
        """The node the model runs on: its own, or for ``auto`` the one it was last started on (or
        found running on, after a daemon restart); None for ``auto`` when it is on none."""
        if definition.node != AUTO_NODE:
            return definition.node
        placed = self._placed.get(definition.id)
        if placed is not None and placed in self._links:
            return placed
        for link in self._links:
            inst = link.instances.get(definition.id)
            if inst is not None and inst.state in (InstanceState.STARTING, InstanceState.READY):
                self._placed[definition.id] = link.node_id
                return link.node_id
        return None

    def placed(self, definition: ModelDefinition) -> ModelDefinition:
        """The definition with ``auto`` replaced by the node it runs on (itself otherwise)."""
        node = self.node_of(definition)
        return definition if node is None or node == definition.node else definition.model_copy(update={"node": node})

    def instance(self, definition: ModelDefinition) -> InstanceInfo | None:
        node = self.node_of(definition)
        link = self._links.get(node) if node is not None else None
        return link.instances.get(definition.id) if link is not None else None

    def status(self, definition: ModelDefinition) -> ModelStatus:
        return self._decorate(self._across(definition, self._status(definition)))

    def _across(self, definition: ModelDefinition, status: ModelStatus) -> ModelStatus:
        """A model across nodes: its helpers shown; one offline makes it not ready (failed)."""
        if not definition.rpc_nodes:
            return status
        running = status.state in (ModelState.STARTING, ModelState.READY)
        status.rpc_helpers = self.rpc.helpers(definition, running)
        problem = self.rpc.problem(definition) if running else None
        if problem is not None:
            status.state, status.error = ModelState.FAILED, problem[1]
        return status

    def _status(self, definition: ModelDefinition) -> ModelStatus:
        if not profile(definition.runtime).on_node:
            return self.external.status(definition)
        node = self.node_of(definition)
        wanted_hash = definition_hash(definition)
        if node is None:  # placed "auto" and on no node now: it is placed when it starts
            return ModelStatus(id=definition.id, served_name=definition.served_name,
                               state=ModelState.STOPPED, node=AUTO_NODE, config_hash=wanted_hash)
        link = self._links.get(node)
        inst = link.instances.get(definition.id) if link is not None else None
        if link is None or not link.online:
            reason = f"node '{node}' is offline" if link is not None else f"node '{node}' is unknown"
            if link is not None and link.last_error:
                reason += f": {link.last_error}"
            state = ModelState.STOPPED if inst is None else ModelState(inst.state.value)
            return ModelStatus(id=definition.id, served_name=definition.served_name, state=state,
                               node=node, error=reason, config_hash=wanted_hash)
        if inst is None:
            refused = self._refused.get(definition.id)
            return ModelStatus(id=definition.id, served_name=definition.served_name,
                               state=ModelState.FAILED if refused else ModelState.STOPPED, node=node,
                               error=f"The start was refused: {refused}" if refused else None,
                               config_hash=wanted_hash)
        running = inst.state in (InstanceState.STARTING, InstanceState.READY)
        return ModelStatus(
            id=definition.id, served_name=definition.served_name, state=ModelState(inst.state.value),
            node=node, endpoint=inst.endpoint, pid=inst.pid, started_at=inst.started_at,
            error=inst.error, last_log_lines=inst.last_log_lines if inst.error else [],
            restart_pending=running and inst.config_hash is not None and inst.config_hash != wanted_hash,
            config_hash=wanted_hash, running_config_hash=inst.config_hash if running else None,
            backend=inst.backend if running else None, offload=inst.offload if running else None)

    def _decorate(self, status: ModelStatus) -> ModelStatus:
        window = self.maintenance.get(status.id) if self.maintenance is not None else None
        status.busy = window.doing if window is not None else None
        status.crash_count = self.book.crashes.get(status.id, 0)
        status.restarts_paused = status.id in self.book.pauses
        status.evicted = self._evicted.get(status.id)
        status.stalled = self._stalled.get(status.id)
        status.slow = self.speed.slow.get(status.id)
        if status.restarts_paused and status.state != ModelState.READY:
            pause = self.book.pauses[status.id]
            status.error = (f"Crashed {pause.crashes} times, automatic restarts paused"
                            + (f": {pause.last_error}" if pause.last_error else ""))
        return status

    def status_by_id(self, model_id: str) -> ModelStatus:
        return self.status(self.registry.require(model_id))

    def all_statuses(self) -> list[ModelStatus]:
        """Every model's status, its node named (for the status page and ``ctl status``)."""
        names = self._node_names()
        return [self.named(self.status(d), names) for d in self.registry.all()]

    def _node_names(self) -> Mapping[str, str]:
        return self.registry.known_nodes() if self.registry.known_nodes is not None else {}

    def named(self, status: ModelStatus, names: Mapping[str, str] | None = None) -> ModelStatus:
        """``status`` with its node's name, for people (views, not the /v1 path: routing needs ids only)."""
        names = self._node_names() if names is None else names
        status.node_name = names.get(status.node, status.node if len(status.node) < 20 else status.node[:12])
        return status

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
        for definition in self.registry.all():
            if not profile(definition.runtime).on_node or (self.node_of(definition) not in (node_id, None)
                                                    and node_id not in definition.rpc_nodes):
                continue
            status = self.status(definition)
            if self._states.get(definition.id) != status.state:
                previous = self._states.get(definition.id)
                self._states[definition.id] = status.state
                problem = self.rpc.problem(definition) if definition.rpc_nodes else None
                self.events.publish("model.state", definition.id, state=status.state.value,
                                    previous=previous.value if previous else None, error=status.error,
                                    **({"helper": problem[0]} if problem else {}))
                for listener in self._listeners:
                    listener(definition.id, previous, status)
        asyncio.get_running_loop().create_task(self._notify())

    def _external_changed(self, definition: ModelDefinition) -> None:
        """An external endpoint was probed: publish its state change as an agent report would."""
        status = self.status(definition)
        previous = self._states.get(definition.id)
        if previous != status.state:
            self._states[definition.id] = status.state
            self.events.publish("model.state", definition.id, state=status.state.value,
                                previous=previous.value if previous else None, error=status.error)
            for listener in self._listeners:
                listener(definition.id, previous, status)
            asyncio.get_running_loop().create_task(self._notify())

    async def watch_external(self) -> None:
        """Probe the external models' endpoints in the background (``daemon.models.external``)."""
        await self.external.watch(self.registry.all, self._external_changed)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

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
                          served_name=definition.served_name, settings=definition.settings,
                          vllm=definition.vllm, mlx=definition.mlx, image=definition.image,
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
            self._external_changed(definition)
            return self.status(definition)
        window = self.maintenance.get(model_id) if self.maintenance is not None else None
        if by_user and window is not None:  # the job restores it when it ends
            raise window.start_refusal()
        if by_user:
            self.book.clear(model_id)
        self._refused.pop(model_id, None)
        self._stalled.pop(model_id, None)
        if self.speed.forget(model_id):
            self.events.publish("model.flagged", model_id, slow=None)
        self.book.want(model_id, True)
        if definition.node == AUTO_NODE and self.status(definition).state not in (ModelState.STARTING,
                                                                                  ModelState.READY):
            self._placed[model_id] = await self._choose_node(definition, in_flight)
        link = await self._link(definition)
        # A node that reports its runtime unavailable is refused before the agent is asked.
        self.registry.check_runtime(definition, status=409)
        async with link.start_lane:
            current = self.status(definition)
            if current.state in (ModelState.STARTING, ModelState.READY):
                return current
            if in_flight is not None:
                await self._make_room(definition, link, in_flight)
            peers = await self._open_helpers(definition, link, in_flight) if definition.rpc_nodes else []
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
                    await self._make_room(definition, link, in_flight, shortfall=short)
            await link.refresh()
        self._evicted.pop(model_id, None)
        self.touch(model_id)
        return self.status(definition)

    def _start_refused(self, definition: ModelDefinition, node_id: str, exc: AgentError) -> None:
        """The node refused the start (its agent answered, with a reason): the model shows as failed
        with it, in every view and as a notice, and is not wanted running, so nothing retries it."""
        if exc.status in (0, 502, 503, 504):  # the node did not answer: offline, not a refusal
            return
        self._refused[definition.id] = exc.message
        self.book.want(definition.id, False)
        self.on_instances(node_id, {})  # publishes the state change (stopped -> failed)

    def forget_refusal(self, model_id: str) -> None:
        """The model's definition changed: its last refusal no longer says anything of it."""
        if self._refused.pop(model_id, None) is not None:
            definition = self.registry.get(model_id)
            node = self.node_of(definition) if definition is not None else None
            if node is not None:
                self.on_instances(node, {})

    # --- making room (daemon.models.placement) -------------------------------------------------
    async def _need(self, definition: ModelDefinition, link: AgentLink) -> int | None:
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

    def _loaded(self, definition: ModelDefinition, link: AgentLink, in_flight: InFlight) -> list[placement.Loaded]:
        """The other models loaded or loading on ``definition``'s node, as the planner sees them."""
        sample = link.latest_sample
        loaded = []
        for other in self.registry.all():
            inst = link.instances.get(other.id)
            if other.id == definition.id or self.node_of(other) != link.node_id or inst is None or \
                    inst.state not in (InstanceState.STARTING, InstanceState.READY):
                continue
            size: int | None
            if other.memory_budget_gib is not None:
                size = int(other.memory_budget_gib * (1 << 30))
            else:
                figures = sample.instances.get(other.id) if sample is not None else None
                size = None if figures is None or figures.rss_bytes is None else \
                    figures.rss_bytes + (figures.gpu_memory_bytes or 0)
            loaded.append(placement.Loaded(model_id=other.id, size_bytes=size, last_used=self.last_used(other.id, 0.0),
                                           in_flight=in_flight(other.served_name), pinned=other.pinned,
                                           model_class=other.model_class))
        for other in self.registry.all():  # models across nodes whose rpc-server this node runs as a helper
            inst = self.instance(other) if link.node_id in other.rpc_nodes and other.id != definition.id else None
            if inst is None or inst.state not in (InstanceState.STARTING, InstanceState.READY):
                continue
            loaded.append(placement.Loaded(model_id=other.id, size_bytes=self.rpc.lent(other.id, link.node_id),
                                           last_used=self.last_used(other.id, 0.0),
                                           in_flight=in_flight(other.served_name), pinned=other.pinned,
                                           model_class=other.model_class))
        return loaded

    async def _make_room(self, definition: ModelDefinition, link: AgentLink, in_flight: InFlight,
                         shortfall: int | None = None) -> None:
        """Unload what the plan says, or refuse with what is using the memory (503)."""
        if definition.rpc_nodes:
            await self._make_room_across(definition, link, in_flight,
                                         None if shortfall is None else {link.node_id: shortfall})
            return
        need = await self._need(definition, link)
        if need is None and shortfall is None:
            return  # no figure to plan with: the agent's admission decides
        figures = await self._figures(link)
        if figures is None and shortfall is None:
            return
        memory = placement.NodeMemory(total=figures.memory_total if figures else 0,
                                      available=figures.memory_available if figures else 0)
        found = placement.plan(need or 0, memory, self._loaded(definition, link, in_flight),
                               definition.model_class, shortfall=shortfall)
        if not found.fits:
            raise OrchestratorError(503, "insufficient_memory", f"Not enough memory on node '{link.node_id}' "
                                    f"for '{definition.id}': {found.reason}")
        for victim in found.evict:
            size = placement.gib(victim.size_bytes or 0)
            reason = f"unloaded to make room for '{definition.id}' ({placement.gib(need or shortfall or 0)} " \
                     f"needed; it was idle, class {victim.model_class}, and held {size})"
            _LOGGER.info("%s %s", victim.model_id, reason)
            self._evicted[victim.model_id] = reason
            self.events.publish("model.evicted", victim.model_id, for_model=definition.id,
                                freed_bytes=victim.size_bytes, needed_bytes=need, reason=reason)
            await self.stop(victim.model_id)  # no longer wanted: start_on_request brings it back

    async def _split_needs(self, definition: ModelDefinition, link: AgentLink) -> tuple[int | None, dict[str, int | None]]:
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

    async def _open_helpers(self, definition: ModelDefinition, link: AgentLink,
                            in_flight: InFlight | None) -> list[RpcPeer]:
        """The helpers' rpc-servers, each grant lending its share; on a start on request a helper
        that refuses its grant for memory gets room made by its shortfall, and it is tried again."""
        lent = (await self._split_needs(definition, link))[1]
        for attempt in range(1, ROOM_ATTEMPTS + 1):
            try:
                return await self.rpc.open(definition, link.node_id, lent)
            except HelperRefused as refused:
                if in_flight is None or refused.node is None or refused.short is None or attempt == ROOM_ATTEMPTS:
                    raise
                await self._make_room_across(definition, link, in_flight, {refused.node: refused.short})
        raise AssertionError("unreachable")

    async def _make_room_across(self, definition: ModelDefinition, link: AgentLink, in_flight: InFlight,
                                shortfalls: dict[str, int] | None = None) -> None:
        """Room on every node of a model across nodes (``split_room.plan_across``): its main's share on
        the main node, each helper's on its helper; all or nothing. After an agent's own refusal
        (``shortfalls``: by node, how much it missed) only that node is planned again."""
        main, helpers = await self._split_needs(definition, link)
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
            figures = await self._figures(here)
            if figures is None and short is None:
                continue
            memory = placement.NodeMemory(total=figures.memory_total if figures else 0,
                                          available=figures.memory_available if figures else 0)
            nodes.append(split_room.NodeNeed(node, role, need or 0, memory,
                                             tuple(self._loaded(definition, here, in_flight)), short))
        found = split_room.plan_across(nodes, definition.model_class)
        if not found.fits:
            raise OrchestratorError(503, "insufficient_memory", f"Not enough memory on {found.role} node "
                                    f"'{self.rpc.name(found.node)}' for '{definition.id}' (across nodes): {found.reason}")
        needs = {n.node: n for n in nodes}
        for eviction in found.evict:
            victim, need = eviction.victim, needs[eviction.node]
            reason = f"unloaded from {need.role} node '{self.rpc.name(eviction.node)}' to make room for " \
                     f"'{definition.id}' across nodes ({placement.gib(need.shortfall or need.need)} needed there; " \
                     f"it was idle, class {victim.model_class}, and held {placement.gib(victim.size_bytes or 0)} there)"
            _LOGGER.info("%s %s", victim.model_id, reason)
            self._evicted[victim.model_id] = reason
            self.events.publish("model.evicted", victim.model_id, for_model=definition.id, node=eviction.node,
                                freed_bytes=victim.size_bytes, needed_bytes=need.need, reason=reason,
                                freed_by_node=dict(eviction.freed))
            await self.stop(victim.model_id)  # a model across nodes stops its helpers' rpc-servers too

    @staticmethod
    async def _figures(link: AgentLink) -> TelemetrySample | AgentStatus | None:
        """The node's memory figures: its latest telemetry sample, else the agent's status now."""
        if link.latest_sample is not None:
            return link.latest_sample
        try:
            return await link.client.status()
        except AgentError:
            return None

    async def _choose_node(self, definition: ModelDefinition, in_flight: InFlight | None) -> str:
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
            figures = await self._figures(link) if link.online else None
            if figures is None:
                continue
            need = await self._need(here, link)
            memory = placement.NodeMemory(total=figures.memory_total, available=figures.memory_available)
            found = placement.plan(need or 0, memory, self._loaded(here, link, in_flight or (lambda _name: 0)),
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

    async def wait_settled(self, model_id: str, timeout: float) -> ModelStatus:
        """Wait until the model is no longer starting or stopping (or ``timeout`` passes)."""
        settled = {ModelState.READY, ModelState.FAILED, ModelState.STOPPED}

        def done() -> bool:
            definition = self.registry.get(model_id)
            return definition is None or self.status(definition).state in settled

        async with self._changed:
            try:
                async with asyncio.timeout(timeout):  # wait_for can swallow a cancel on 3.11
                    await self._changed.wait_for(done)
            except TimeoutError:
                pass
        return self.status_by_id(model_id)

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
                  if (d.node == node_id or (d.node == AUTO_NODE and self._placed.get(d.id) == node_id))
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
