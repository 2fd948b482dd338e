"""Which models pulled from the hub have a newer revision, for the Models page's update badge, and the
Update and Roll back actions behind it (``daemon.sources.updates`` does the work).

The daemon checks the hub daily; this view-model reads its last answers when the fleet is first in
(and after a reconnect), and again when an event says a model changed or has an update. An update
is a download on the model's node: the daemon swaps the model onto the new files (restarting it if
it ran) once they are in and checked, and the model's ``model.updated`` event brings the change here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import MappingProxyType

from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from core.tasks import unless_running
from daemon.api.client import DaemonError
from daemon.api.model_updates import ModelUpdate
from daemon.api.models import Event, ModelView
from daemon.api.sources import Transfer

_LOGGER = logging.getLogger(__name__)

_RELOAD_ON = ("model.update_available", "model.update_refused", "model.updated", "model.added", "model.removed")


def badge_text(found: ModelUpdate | None) -> str | None:
    """The badge on a model's row: None when there is nothing to offer or say."""
    if found is None:
        return None
    if found.state == "available":
        return "Update available"
    if found.state == "refused":
        return "Update refused"
    return "Roll back…" if found.can_roll_back else None


def badge_tooltip(found: ModelUpdate) -> str:
    if found.state == "available":
        return (f"{found.hf_repo}: revision {(found.latest or '')[:12]} is newer than the one it runs "
                f"({(found.revision or '?')[:12]}); updating fetches it beside the old files, which are kept")
    if found.state == "refused":
        return f"The hub's answer about {found.hf_repo} is refused: {found.reason}"
    return f"Updated from revision {(found.previous_revision or '?')[:12]}, whose files are kept"


class ModelUpdatesViewModel:
    def __init__(self, fleet: FleetViewModel) -> None:
        self.fleet = fleet
        self.state: Observable[Mapping[str, ModelUpdate]] = Observable(MappingProxyType({}))
        self._connected = False
        self._loading: asyncio.Future[None] | None = None
        fleet.snapshot.subscribe(self._on_fleet, now=True)
        fleet.events.subscribe(self._on_event)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        now = snapshot.loaded and snapshot.connected
        if now and not self._connected:  # first in, or back after the daemon was away
            self.reload()
        self._connected = now

    def _on_event(self, event: Event) -> None:
        if event.type in _RELOAD_ON:
            self.reload()

    def reload(self) -> None:
        self._loading = unless_running(self._loading, self.load)

    async def load(self) -> None:
        try:
            found = await self.fleet.client.model_updates()
        except DaemonError as exc:
            _LOGGER.debug("model updates not read: %s", exc.message)
            return
        self.state.set(MappingProxyType({f.model: f for f in found}))

    async def update(self, model_id: str) -> Transfer:
        transfer = await self.fleet.client.update_model_files(model_id)
        await self.load()
        return transfer

    async def rollback(self, model_id: str) -> ModelView:
        view = await self.fleet.client.rollback_model(model_id)
        await self.fleet.refresh_model(model_id)
        await self.load()
        return view
