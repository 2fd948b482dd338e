"""``AppContext``: the view-models of one app session, built around one daemon client.

Pages and the tray receive the context and pick what they render. ``act`` runs a user's action
on the loop and turns a daemon error into a message for the status bar instead of a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.viewmodels.access import AccessViewModel
from app.viewmodels.app_settings import AppSettingsViewModel
from app.viewmodels.charts import ChartsViewModel
from app.viewmodels.disk import DiskViewModel
from app.viewmodels.first_run import FirstRunViewModel
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.logs import LogsViewModel
from app.viewmodels.models_page import ModelsPageViewModel
from app.viewmodels.node_charts import NodeChartsViewModel
from app.viewmodels.nodes import NodesViewModel
from app.viewmodels.observable import Emitter
from app.viewmodels.pairing import PairingWizard
from app.viewmodels.playground import PlaygroundViewModel
from app.viewmodels.releases import ReleasesViewModel
from daemon.api.client import DaemonError
from daemon.api.protocol import DaemonApi


@dataclass(frozen=True)
class Message:
    text: str
    error: bool = False


@dataclass
class AppContext:
    client: DaemonApi
    home: Path
    fleet: FleetViewModel
    models: ModelsPageViewModel
    logs: LogsViewModel
    charts: ChartsViewModel
    playground: PlaygroundViewModel
    access: AccessViewModel
    settings: AppSettingsViewModel
    messages: Emitter[Message]
    nodes: NodesViewModel
    node_charts: NodeChartsViewModel
    pairing: PairingWizard
    first_run: FirstRunViewModel
    disk: DiskViewModel  # a node's model files (the Nodes page's Disk card)
    releases: ReleasesViewModel  # versions, the daemon's restart after an update, the agent rollout
    # Starts this machine's daemon again when it is down (app.bootstrap.connect_daemon); None where the
    # app may not start one (--no-daemon-start, a daemon on another machine, the demo)
    start_daemon: Callable[[], Awaitable[Any]] | None = None

    @classmethod
    def create(cls, client: DaemonApi, home: Path, *, prefs_path: Path | None = None,
               platform: str | None = None, host_refresh_s: float = 5.0) -> AppContext:
        fleet = FleetViewModel(client, host_refresh_s=host_refresh_s)
        settings = AppSettingsViewModel(home, prefs_path, platform)
        return cls(client=client, home=home, fleet=fleet, models=ModelsPageViewModel(fleet),
                   logs=LogsViewModel(client), charts=ChartsViewModel(client, fleet),
                   playground=PlaygroundViewModel(fleet), access=AccessViewModel(fleet),
                   settings=settings, messages=Emitter(),
                   nodes=NodesViewModel(client, fleet, refresh_s=host_refresh_s),
                   node_charts=NodeChartsViewModel(client), pairing=PairingWizard(client),
                   first_run=FirstRunViewModel(client, fleet), disk=DiskViewModel(client, fleet),
                   releases=ReleasesViewModel(client, fleet, settings.updates))

    def act(self, action: Awaitable[Any], done: str | None = None) -> asyncio.Future[Any]:
        """Run a user's action; report its failure (or ``done``) as a message."""

        async def run() -> Any:
            try:
                result = await action
            except DaemonError as exc:
                self.messages.emit(Message(exc.message, error=True))
                return None
            except ValueError as exc:
                self.messages.emit(Message(str(exc), error=True))
                return None
            if done:
                self.messages.emit(Message(done))
            return result

        return asyncio.ensure_future(run())

    def start(self) -> None:
        self.fleet.start()

    def start_update_checks(self) -> asyncio.Task[None] | None:
        """The daily check of the release feed, unless the user turned it off (the app's main starts
        it; tests call it with their own checker)."""
        if not self.settings.state.value.prefs.check_updates_daily:
            return None
        return asyncio.ensure_future(self.settings.updates.check_daily())

    async def close(self) -> None:
        self.releases.close()
        self.logs.stop()
        self.first_run.close()
        self.charts.hide()
        self.nodes.close()
        self.node_charts.hide()
        await self.playground.close()
        await self.fleet.stop()
        await self.client.close()
