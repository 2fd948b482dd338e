"""The Releases page's view-model: which version runs where, the daemon brought onto the installed
one, and the agent release rolled out to the nodes one at a time.

After an update the new app finds the old daemon still serving; ``catch_up`` (run once at start)
restarts it onto the installed version when it is older (``app.daemon_restart``) and says "Now
running X.Y.Z". The rollout is the daemon's (``POST /api/nodes/upgrade`` with the feed this app
updated from, so the nodes get the same release): its ``upgrade.*`` events, which the fleet's event
feed passes on, refresh the per-node progress.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from app.daemon_restart import BootstrapError, DaemonRestarter, older
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observable import Observable, Unsubscribe
from app.viewmodels.updates import UpdatesState, UpdatesViewModel
from daemon.api.client import DaemonError
from daemon.api.models import Event
from daemon.api.nodes import NodeView
from daemon.api.program import program_version
from daemon.api.protocol import DaemonApi
from daemon.api.upgrades import RolloutState, RolloutView

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReleasesState:
    installed: str  # this app's version: what the daemon should run
    running: str = ""  # the daemon's, as it reports it ("" until read)
    latest: str | None = None  # the release feed's, at the last check that read it
    nodes: tuple[NodeView, ...] = ()
    rollout: RolloutView = field(default_factory=RolloutView)
    can_restart: bool = False  # this machine's daemon, which the app may start
    restarting: bool = False  # the daemon is being restarted onto the installed version
    starting: bool = False  # the rollout's start was asked for, no answer yet
    line: str = ""  # the daemon's restart: "Now running 0.2.0", or why not
    error: bool = False
    refusal: str | None = None  # why the daemon refused the last rollout (a forged or older release)

    @property
    def daemon_behind(self) -> bool:
        return bool(self.running) and older(self.running, self.installed)

    @property
    def nodes_behind(self) -> tuple[NodeView, ...]:
        """Paired nodes whose agent runs an older version than the daemon."""
        return tuple(n for n in self.nodes if not n.local and n.version and older(n.version, self.running))

    @property
    def can_roll_out(self) -> bool:
        return not (self.restarting or self.starting) and self.rollout.state != RolloutState.RUNNING and any(
            not n.local for n in self.nodes)


def node_cells(node: NodeView, running: str, rollout: RolloutView) -> tuple[str, str, str]:
    """What the page's table shows of a node: its name, its agent's version, its rollout progress."""
    name = f"{node.name} (this machine)" if node.local else node.name
    step = next((n for n in rollout.nodes if n.node == node.id), None)
    if step is not None:
        progress = step.state.value.capitalize() + (f": {step.reason}" if step.reason else "")
    elif node.local:
        progress = "Runs with the daemon"
    elif node.version and older(node.version, running):
        progress = "Older than the daemon"
    else:
        progress = "Up to date" if node.version else "Not reported"
    return name, node.version or "—", progress


class ReleasesViewModel:
    def __init__(self, client: DaemonApi, fleet: FleetViewModel, updates: UpdatesViewModel,
                 installed_version: str | None = None) -> None:
        self._client = client
        self._fleet = fleet
        self._updates = updates
        self.restarter: DaemonRestarter | None = None  # wired by the app where it may start the daemon
        self.state: Observable[ReleasesState] = Observable(ReleasesState(installed_version or program_version(),
                                                                         latest=updates.state.value.latest))
        self._unsubscribe: list[Unsubscribe] = [fleet.events.subscribe(self._on_event),
                                                updates.state.subscribe(self._on_updates)]

    def set_restarter(self, restarter: DaemonRestarter | None) -> None:
        self.restarter = restarter
        installed = restarter.installed_version if restarter is not None else self.state.value.installed
        self.state.set(replace(self.state.value, can_restart=restarter is not None, installed=installed))

    def _on_updates(self, s: UpdatesState) -> None:
        if s.latest != self.state.value.latest:
            self.state.set(replace(self.state.value, latest=s.latest))

    def _on_event(self, event: Event) -> None:
        if event.type.startswith("upgrade."):
            asyncio.ensure_future(self.refresh())

    async def refresh(self) -> None:
        try:
            status = await self._client.status()
            nodes = await self._client.list_nodes()
            rollout = await self._client.upgrade_status()
        except DaemonError as exc:
            _LOGGER.info("releases: %s", exc.message)
            return
        self.state.set(replace(self.state.value, running=status.daemon.version, nodes=tuple(nodes), rollout=rollout))

    async def catch_up(self) -> str | None:
        """At start: restart the daemon onto the installed version when it runs an older one."""
        await self.refresh()
        if self.restarter is None or not self.state.value.daemon_behind:
            return None
        return await self.restart_daemon()

    async def restart_daemon(self) -> str | None:
        """Restart this machine's daemon onto the installed version; the outcome's line."""
        if self.restarter is None or self.state.value.restarting:
            return None
        self.state.set(replace(self.state.value, restarting=True, line="", error=False))
        try:
            outcome = await self.restarter.restart(self._client)  # type: ignore[arg-type]  # a DaemonClient here
        except (DaemonError, BootstrapError) as exc:
            self.state.set(replace(self.state.value, restarting=False, line=exc.message, error=True))
            return exc.message
        try:
            await self._fleet.resync()
        except DaemonError as exc:
            _LOGGER.info("releases: resync after the restart: %s", exc.message)
        await self.refresh()
        behind = self.state.value.nodes_behind
        line = outcome.message
        if outcome.url.rstrip("/") != getattr(self._client, "base_url", outcome.url).rstrip("/"):
            line += f" at {outcome.url}: quit MirbadLLM and open it again to follow it there"
        elif outcome.ok and behind:
            line += f". {len(behind)} node(s) run an older agent: Roll out to nodes."
        self.state.set(replace(self.state.value, restarting=False, running=outcome.version, line=line,
                               error=not outcome.ok))
        return self.state.value.line

    async def roll_out(self) -> None:
        """Start the daemon's rollout of the staged agent release; a refusal is the page's line."""
        if not self.state.value.can_roll_out:
            return
        self.state.set(replace(self.state.value, starting=True, refusal=None))
        try:
            # the feed this app updated from: the daemon fetches that release's agent builds
            rollout = await self._client.start_upgrade(feed_url=self._updates.state.value.feed_url or None)
        except DaemonError as exc:
            self.state.set(replace(self.state.value, starting=False, refusal=exc.message))
            return
        self.state.set(replace(self.state.value, starting=False, rollout=rollout))

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
