"""The one owner of each model's state on the master: ``ModelStates``.

A model's state is what its node's agent last reported of its instance (``daemon.nodes.links``), put
together with what only the master knows: the node a model placed ``auto`` runs on, a start its node
refused, an answer cut for silence (Stalled), a decode speed far below its own (Slow), an unload to
make room, the crash book's pause and a job's window. ``ModelStates`` holds those facts, derives
each ``ModelStatus`` from them, and is the one writer of the state last published: ``settle`` turns
a change into a ``model.state`` event and tells the listeners (the health monitor). The
orchestrator's commands (``daemon.models.orchestrator``), the router (``where``: one lookup of node,
link and instance per request) and every view read from here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.api.models import InstanceInfo, InstanceState
from agent.api.runtimes import profile
from daemon.api.models import AUTO_NODE, ModelDefinition, ModelState, ModelStatus
from daemon.events import EventBus
from daemon.models.external import ExternalEndpoints
from daemon.models.maintenance import Maintenance
from daemon.models.registry import Registry, definition_hash
from daemon.models.restarts import RestartBook
from daemon.models.rpc import RpcHelpers
from daemon.models.speed import SpeedWatch
from daemon.nodes.links import AgentLink, Links

StateListener = Callable[[str, ModelState | None, ModelStatus], None]
_RUNNING = (InstanceState.STARTING, InstanceState.READY)


@dataclass(frozen=True, slots=True)
class Where:
    """Where a model runs now, looked up once: its node, that node's link and the instance there."""

    node: str
    link: AgentLink
    instance: InstanceInfo


class ModelStates:
    def __init__(self, registry: Registry, events: EventBus, book: RestartBook, links: Links,
                 external: ExternalEndpoints, rpc: RpcHelpers, maintenance: Maintenance | None = None) -> None:
        self.registry = registry
        self.events = events
        self.book = book
        self.external = external
        self.rpc = rpc
        self.maintenance = maintenance  # the jobs' windows: a model a job holds shows it
        self.speed = SpeedWatch()  # the Slow flag, from each model's own decode speeds (daemon.models.speed)
        self._links = links
        self._listeners: list[StateListener] = []
        self._published: dict[str, ModelState] = {}  # model id -> the state last published (written in settle only)
        self._changed = asyncio.Condition()
        self._last_used: dict[str, float] = {}
        self._placed: dict[str, str] = {}  # model placed "auto" -> the node it was started on
        self._evicted: dict[str, str] = {}  # model id -> why it was last unloaded to make room
        self._stalled: dict[str, str] = {}  # model id -> its last answer cut for silence, until one completes
        # model id -> why its node refused its last start (a missing file, a bad argument): shown as
        # failed with that reason until it is started again or changed; never restarted as a crash
        self._refused: dict[str, str] = {}

    def on_change(self, listener: StateListener) -> None:
        """Call ``listener(model_id, previous, status)`` on each model state change (the health monitor)."""
        self._listeners.append(listener)

    # --- the master's own facts ------------------------------------------------------------------
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

    def starting(self, model_id: str) -> None:
        """A start was asked: the flags of the model's last run go."""
        self._refused.pop(model_id, None)
        self._stalled.pop(model_id, None)
        if self.speed.forget(model_id):
            self.events.publish("model.flagged", model_id, slow=None)

    def started(self, model_id: str) -> None:
        self._evicted.pop(model_id, None)
        self.touch(model_id)

    def place(self, model_id: str, node_id: str) -> None:
        """A model placed ``auto`` starts on ``node_id``."""
        self._placed[model_id] = node_id

    def placed_on(self, model_id: str) -> str | None:
        return self._placed.get(model_id)

    def evicted(self, model_id: str, why: str) -> None:
        self._evicted[model_id] = why

    def refused(self, definition: ModelDefinition, node_id: str, why: str) -> None:
        """Its node refused the start: failed with ``why`` in every view, and not wanted running."""
        self._refused[definition.id] = why
        self.book.want(definition.id, False)
        self.settle_node(node_id)  # publishes the state change (stopped -> failed)

    def forget_refusal(self, model_id: str) -> None:
        """The model's definition changed: its last refusal no longer says anything of it."""
        if self._refused.pop(model_id, None) is not None:
            definition = self.registry.get(model_id)
            node = self.node_of(definition) if definition is not None else None
            if node is not None:
                self.settle_node(node)

    # --- where it runs -------------------------------------------------------------------------
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
            if inst is not None and inst.state in _RUNNING:
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

    def where(self, definition: ModelDefinition) -> Where | None:
        """The model's node, link and instance in one lookup (the router's, once per request); None
        when it is on no known node or its node does not know it."""
        node = self.node_of(definition)
        link = self._links.get(node) if node is not None else None
        instance = link.instances.get(definition.id) if link is not None else None
        return None if node is None or link is None or instance is None else Where(node, link, instance)

    # --- status --------------------------------------------------------------------------------
    def status(self, definition: ModelDefinition) -> ModelStatus:
        return self._decorate(self._across(definition, self._status(definition)))

    def status_by_id(self, model_id: str) -> ModelStatus:
        return self.status(self.registry.require(model_id))

    def all_statuses(self) -> list[ModelStatus]:
        """Every model's status, its node named (for the status page and ``ctl status``)."""
        names = self._node_names()
        return [self.named(self.status(d), names) for d in self.registry.all()]

    def named(self, status: ModelStatus, names: Mapping[str, str] | None = None) -> ModelStatus:
        """``status`` with its node's name, for people (views, not the /v1 path: routing needs ids only)."""
        names = self._node_names() if names is None else names
        status.node_name = names.get(status.node, status.node if len(status.node) < 20 else status.node[:12])
        return status

    def _node_names(self) -> Mapping[str, str]:
        return self.registry.known_nodes() if self.registry.known_nodes is not None else {}

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
        running = inst.state in _RUNNING
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

    # --- the one writer of published states -----------------------------------------------------
    def settle_node(self, node_id: str) -> None:
        """A node's agent reported (or a fact of its models changed): publish its models' changes."""
        for definition in self.registry.all():
            if not profile(definition.runtime).on_node or (self.node_of(definition) not in (node_id, None)
                                                           and node_id not in definition.rpc_nodes):
                continue
            self.settle(definition)
        asyncio.get_running_loop().create_task(self._notify())

    def settle(self, definition: ModelDefinition) -> bool:
        """Publish the model's state when it changed since last published; True when it did."""
        status = self.status(definition)
        previous = self._published.get(definition.id)
        if previous == status.state:
            return False
        self._published[definition.id] = status.state
        problem = self.rpc.problem(definition) if definition.rpc_nodes else None
        self.events.publish("model.state", definition.id, state=status.state.value,
                            previous=previous.value if previous else None, error=status.error,
                            **({"helper": problem[0]} if problem else {}))
        for listener in self._listeners:
            listener(definition.id, previous, status)
        return True

    def external_changed(self, definition: ModelDefinition) -> None:
        """An external endpoint was probed: publish its state change as an agent report would."""
        if self.settle(definition):
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

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
