"""The Services page: a node's OS services (systemd units, launchd jobs, Windows services) and
start, stop, restart on the ones its whitelist allows.

The node's agent decides what may be done; this shows its verdict per service (manageable,
protected, or "System — not manageable" with the deny-list pattern) and never offers an action it
would refuse. A protected service's action carries the name the person typed (``confirm``). The
list is read when the page opens, when the node changes, after each action and on ``refresh``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.nodes import NodeState, NodeView
from daemon.api.protocol import DaemonApi
from daemon.api.services import (
    ServiceAction,
    ServiceActionResult,
    ServiceInfo,
    ServicesList,
    ServiceState,
)

MANAGERS = {"systemd": "systemd", "launchd": "launchd", "scm": "Windows services", "none": "no service manager"}
STATE_LABELS = {ServiceState.RUNNING: "Running", ServiceState.STOPPED: "Stopped", ServiceState.STARTING: "Starting",
                ServiceState.STOPPING: "Stopping", ServiceState.FAILED: "Failed", ServiceState.UNKNOWN: "Unknown"}


def verdict(info: ServiceInfo) -> str:
    """What may be done with ``info``, in the page's words."""
    if info.denied_by is not None:
        return f"System — not manageable ({info.denied_by})"
    if not info.whitelisted:
        return "Not whitelisted"
    return "Protected — type its name" if info.protected else "Manageable"


def actions_for(info: ServiceInfo) -> tuple[ServiceAction, ...]:
    """The actions worth offering: none for what the agent would refuse, no start of a running one."""
    if not info.manageable:
        return ()
    if info.state in (ServiceState.RUNNING, ServiceState.STARTING):
        return ("stop", "restart")
    return ("start",)


@dataclass(frozen=True)
class ServicesState:
    nodes: tuple[NodeView, ...] = ()
    node_id: str | None = None
    show_all: bool = False
    listing: ServicesList | None = None
    loading: bool = False
    busy: frozenset[str] = frozenset()  # services with an action in flight
    error: str | None = None

    @property
    def node(self) -> NodeView | None:
        return next((n for n in self.nodes if n.id == self.node_id), None)

    @property
    def services(self) -> tuple[ServiceInfo, ...]:
        return tuple(self.listing.services) if self.listing else ()

    @property
    def note(self) -> str:
        """One line over the table: the node's service manager, or why there is nothing."""
        if self.error:
            return self.error
        if self.listing is None:
            return "Loading…" if self.loading else ""
        if self.listing.error:
            return self.listing.error
        manager = MANAGERS.get(self.listing.manager, self.listing.manager)
        if not self.listing.services:
            return (f"{manager}: no service is whitelisted on this node. List its services in the agent's "
                    "services.json (allow) or the daemon's services.json.") if not self.show_all \
                else f"{manager}: no services."
        return f"{manager}: {len(self.listing.services)} services" + ("" if self.show_all else " whitelisted")


class ServicesViewModel:
    def __init__(self, fleet: FleetViewModel) -> None:
        self.client: DaemonApi = fleet.client
        self.state: Observable[ServicesState] = Observable(ServicesState())
        self._connected = False
        fleet.snapshot.subscribe(self._on_fleet, now=True)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        self._connected = snapshot.connected

    async def refresh(self) -> None:
        """Read the nodes, then the chosen node's services (the first online node when none is chosen)."""
        s = self.state.value
        self.state.set(replace(s, loading=True))
        try:
            nodes = tuple(await self.client.list_nodes())
        except DaemonError as exc:
            self.state.set(replace(self.state.value, loading=False, error=exc.message))
            return
        node_id = s.node_id if any(n.id == s.node_id for n in nodes) else next(
            (n.id for n in nodes if n.state is not NodeState.OFFLINE), nodes[0].id if nodes else None)
        self.state.set(replace(self.state.value, nodes=nodes, node_id=node_id))
        await self._load()

    async def _load(self) -> None:
        s = self.state.value
        if s.node_id is None:
            self.state.set(replace(s, listing=None, loading=False, error="No node to show."))
            return
        try:
            listing = await self.client.list_services(s.node_id, s.show_all)
        except DaemonError as exc:
            if self.state.value.node_id == s.node_id:
                self.state.set(replace(self.state.value, listing=None, loading=False, error=exc.message))
            return
        now = self.state.value
        if now.node_id == s.node_id and now.show_all == s.show_all:  # not an answer to a question since changed
            self.state.set(replace(now, listing=listing, loading=False, error=None))

    async def select_node(self, node_id: str) -> None:
        s = self.state.value
        if node_id != s.node_id:
            self.state.set(replace(s, node_id=node_id, listing=None, error=None, busy=frozenset()))
            await self._load()

    async def set_show_all(self, show_all: bool) -> None:
        s = self.state.value
        if show_all != s.show_all:
            self.state.set(replace(s, show_all=show_all))
            await self._load()

    async def act(self, name: str, action: ServiceAction, confirm: str | None = None) -> ServiceActionResult:
        """Run ``action`` on the chosen node's service ``name``; its row shows the state afterwards."""
        s = self.state.value
        if s.node_id is None:
            raise ValueError("Choose a node first.")
        node_id = s.node_id
        self.state.set(replace(s, busy=s.busy | {name}))
        try:
            result = await self.client.service_action(node_id, name, action, confirm)
        finally:
            now = self.state.value
            self.state.set(replace(now, busy=now.busy - {name}))
        now = self.state.value
        if now.node_id == node_id and now.listing is not None:
            services = [result.service if x.name == result.service.name else x for x in now.listing.services]
            self.state.set(replace(now, listing=now.listing.model_copy(update={"services": services})))
        return result
