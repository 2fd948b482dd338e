"""The Services page: a node's OS services (systemd units, launchd jobs, Windows services) and
start, stop, restart on the ones its whitelist allows.

The node's agent decides what may be done; this shows its verdict per service (manageable,
protected, or "System — not manageable" with the deny-list pattern) and never offers an action it
would refuse. A protected service's action carries the name the person typed (``confirm``). The
list is read when the page opens, when the node changes, after each action and on ``refresh``.

The daemon's whitelist (``services_policy``) is read with it: with every service shown, one not
whitelisted and not denied offers "Allow" (this node's block of the daemon's ``services.json``),
and one the daemon whitelists offers "Remove from whitelist" (from this node's block and, when it
is there, every node's). One the agent's own file whitelists offers no removal: it is not ours.
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
    ServicesPolicy,
    ServiceState,
    normalise,
    with_allowed,
    without,
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
    policy: ServicesPolicy | None = None  # the daemon's whitelist (None: not readable from this daemon)

    def whitelisted_by(self, info: ServiceInfo) -> tuple[str, ...]:
        """Where the daemon's whitelist lists ``info``: "node" (this node's block), "all" (every node's)."""
        if self.policy is None or self.node_id is None:
            return ()
        keys = {normalise(n) for n in (info.name, *info.aliases)}
        found = []
        if keys & {normalise(n) for n in self.policy.names(self.node_id).allow}:
            found.append("node")
        if keys & {normalise(n) for n in self.policy.allow}:
            found.append("all")
        return tuple(found)

    def policy_actions(self, info: ServiceInfo) -> tuple[str, ...]:
        """"allow" / "remove" where the daemon's whitelist may change for ``info``; none for a denied one."""
        if self.policy is None or self.policy.error or info.denied_by is not None:
            return ()
        if self.whitelisted_by(info):
            return ("remove",)
        return ("allow",) if self.show_all and not info.whitelisted else ()

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
        try:
            policy: ServicesPolicy | None = await self.client.services_policy(s.node_id)
        except DaemonError:
            policy = None  # the list still shows; only the whitelist's edits are not offered
        now = self.state.value
        if now.node_id == s.node_id and now.show_all == s.show_all:  # not an answer to a question since changed
            self.state.set(replace(now, listing=listing, loading=False, error=None, policy=policy))

    async def allow(self, name: str) -> str:
        """Whitelist ``name`` on the chosen node (the daemon's ``services.json``); the list read again."""
        s = self.state.value
        if s.node_id is None:
            raise ValueError("Choose a node first.")
        node_id = s.node_id
        current = (await self.client.services_policy(node_id)).names(node_id)
        await self.client.set_services_policy(with_allowed(current, name), node_id)
        await self._reload(node_id)
        return f"{normalise(name)} allowed on {self._node_label(node_id)}"

    async def remove(self, name: str) -> str:
        """Take ``name`` off the daemon's whitelist: this node's block, and every node's when it is there."""
        s = self.state.value
        if s.node_id is None:
            raise ValueError("Choose a node first.")
        node_id = s.node_id
        policy = await self.client.services_policy(node_id)
        key = normalise(name)
        everywhere = key in {normalise(n) for n in policy.allow}
        if key in {normalise(n) for n in policy.names(node_id).allow}:
            await self.client.set_services_policy(without(policy.names(node_id), name), node_id)
        if everywhere:
            await self.client.set_services_policy(without(policy.names(None), name))
        await self._reload(node_id)
        where = "every node's whitelist" if everywhere else f"the whitelist of {self._node_label(node_id)}"
        return f"{key} removed from {where}"

    def _node_label(self, node_id: str) -> str:
        node = next((n for n in self.state.value.nodes if n.id == node_id), None)
        return "this machine" if node is None or node.local else node.name

    async def _reload(self, node_id: str) -> None:
        if self.state.value.node_id == node_id:
            await self._load()

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
