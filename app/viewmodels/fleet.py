"""``FleetViewModel``: every model's definition and status, the daemon and its hosts, as one snapshot.

The snapshot is replaced, never mutated, whenever the event feed or a host refresh brings news;
widgets subscribe to ``snapshot`` and render it. State transitions worth telling the user about
(a model became ready, a model failed) go out on ``notices``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from app import format as fmt
from app.viewmodels.events import EventFeed
from app.viewmodels.observable import Emitter, Observable
from daemon.api.client import DaemonError
from daemon.api.files import ModelRemoval
from daemon.api.models import (
    DaemonInfo,
    Event,
    HostSnapshot,
    ModelDefinition,
    ModelState,
    ModelStatus,
    ModelView,
    RouterStats,
    StatusResponse,
)
from daemon.api.protocol import DaemonApi

_LOGGER = logging.getLogger(__name__)

DEFAULT_API_URL = "http://127.0.0.1:8484/v1"


class FleetState(str, Enum):
    """What the tray icon shows, worst first."""

    UNREACHABLE = "unreachable"
    FAILED = "failed"
    STARTING = "starting"
    READY = "ready"
    IDLE = "idle"


FLEET_STATE_TEXT = {
    FleetState.UNREACHABLE: "daemon unreachable",
    FleetState.FAILED: "a model failed",
    FleetState.STARTING: "a model is starting",
    FleetState.READY: "all running models ready",
    FleetState.IDLE: "no model running",
}


def v1_url(api_url: str | None) -> str:
    """The OpenAI base URL (ending in ``/v1``) whatever form the daemon reports."""
    if not api_url:
        return DEFAULT_API_URL
    url = api_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


@dataclass(frozen=True)
class Notice:
    """Something to tell the user in a desktop notification."""

    model_id: str
    title: str
    message: str
    failed: bool


@dataclass(frozen=True)
class FleetSnapshot:
    connected: bool = False
    error: str | None = None
    loaded: bool = False
    daemon: DaemonInfo | None = None
    models: tuple[ModelView, ...] = ()
    hosts: tuple[HostSnapshot, ...] = ()
    router: dict[str, RouterStats] = field(default_factory=dict)
    keys_warning: str | None = None  # the daemon's private keys are 0600 files, not in a keychain: why

    @property
    def api_url(self) -> str:
        return v1_url(self.daemon.api_url if self.daemon else None)

    @property
    def keys_required(self) -> bool:
        return bool(self.daemon and self.daemon.keys_required)

    def model(self, model_id: str) -> ModelView | None:
        return next((m for m in self.models if m.definition.id == model_id), None)

    def count(self, *states: ModelState) -> int:
        return sum(1 for m in self.models if m.status.state in states)

    @property
    def state(self) -> FleetState:
        if not self.connected:
            return FleetState.UNREACHABLE
        if self.count(ModelState.FAILED):
            return FleetState.FAILED
        if self.count(ModelState.STARTING, ModelState.STOPPING):
            return FleetState.STARTING
        if self.count(ModelState.READY):
            return FleetState.READY
        return FleetState.IDLE

    @property
    def summary(self) -> str:
        """One line for a tooltip: the state and the counts behind it."""
        if not self.connected and not self.loaded and not self.error:
            return "MirbadLLM — connecting to the daemon…"
        if not self.connected:
            return f"MirbadLLM — daemon unreachable{': ' + self.error if self.error else ''}"
        ready = self.count(ModelState.READY)
        parts = [f"{ready} of {len(self.models)} models ready"]
        if starting := self.count(ModelState.STARTING, ModelState.STOPPING):
            parts.append(f"{starting} starting")
        if failed := self.count(ModelState.FAILED):
            parts.append(f"{failed} failed")
        return f"MirbadLLM — {FLEET_STATE_TEXT[self.state]} ({', '.join(parts)})"

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(sorted({t for m in self.models for t in m.definition.tags}))

    @property
    def local_host(self) -> HostSnapshot | None:
        return next((h for h in self.hosts if h.node == "local"), self.hosts[0] if self.hosts else None)


class FleetViewModel:
    """Owns the event feed and the fleet snapshot; the actions every page and the tray share."""

    def __init__(self, client: DaemonApi, *, host_refresh_s: float = 5.0, poll_timeout: float = 30.0) -> None:
        self.client = client
        self.snapshot: Observable[FleetSnapshot] = Observable(FleetSnapshot())
        self.notices: Emitter[Notice] = Emitter()
        self.events: Emitter[Event] = Emitter()
        self._host_refresh_s = host_refresh_s
        self.feed = EventFeed(client, on_resync=self.resync, on_events=self._apply_events,
                              on_connection=self._on_connection, poll_timeout=poll_timeout)
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self.feed.run()), asyncio.ensure_future(self._refresh_hosts())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- state in -------------------------------------------------------------------------------
    async def resync(self) -> int:
        status = await self.client.status()
        views = await self.client.list_models()
        by_id = {s.id: s for s in status.models}
        models = tuple(ModelView(definition=v.definition, status=by_id.get(v.definition.id, v.status))
                       for v in views)
        self._publish(replace(self.snapshot.value, connected=True, error=None, loaded=True,
                              daemon=status.daemon, hosts=tuple(status.hosts), router=dict(status.router),
                              models=models, keys_warning=_keys_warning(status)))
        return status.last_event_id

    async def _refresh_hosts(self) -> None:
        """Host gauges and router counters are figures, not events: refresh them on a timer."""
        while True:
            await asyncio.sleep(self._host_refresh_s)
            if not self.snapshot.value.connected:
                continue
            try:
                status = await self.client.status()
            except DaemonError as exc:
                _LOGGER.debug("host refresh failed: %s", exc)
                continue
            current = self.snapshot.value
            by_id = {s.id: s for s in status.models}
            models = tuple(ModelView(definition=m.definition, status=by_id.get(m.definition.id, m.status))
                           for m in current.models)
            self._publish(replace(current, daemon=status.daemon, hosts=tuple(status.hosts),
                                  router=dict(status.router), models=models, keys_warning=_keys_warning(status)))

    async def _apply_events(self, events: Sequence[Event]) -> None:
        changed: list[str] = []
        for event in events:
            self.events.emit(event)
            if not event.model:
                continue
            if event.type == "model.removed":
                self._drop(event.model)
            elif event.type.startswith("model.") and event.model not in changed:
                changed.append(event.model)
        for model_id in changed:
            await self.refresh_model(model_id)

    async def refresh_model(self, model_id: str) -> None:
        try:
            view = await self.client.get_model(model_id)
        except DaemonError as exc:
            if exc.status == 404:
                self._drop(model_id)
                return
            raise
        self._put(view)

    def _on_connection(self, connected: bool, error: str | None) -> None:
        current = self.snapshot.value
        if current.connected != connected or current.error != error:
            self._publish(replace(current, connected=connected, error=error))

    # --- snapshot edits -------------------------------------------------------------------------
    def _put(self, view: ModelView) -> None:
        current = self.snapshot.value
        ids = [m.definition.id for m in current.models]
        models = list(current.models)
        if view.definition.id in ids:
            models[ids.index(view.definition.id)] = view
        else:
            models.append(view)
        self._publish(replace(current, models=tuple(models)))

    def _put_status(self, status: ModelStatus) -> None:
        current = self.snapshot.value.model(status.id)
        if current is not None:
            self._put(ModelView(definition=current.definition, status=status))

    def _drop(self, model_id: str) -> None:
        current = self.snapshot.value
        self._publish(replace(current, models=tuple(m for m in current.models if m.definition.id != model_id)))

    def _publish(self, new: FleetSnapshot) -> None:
        old = self.snapshot.value
        if old.loaded:
            for notice in _transitions(old, new):
                self.notices.emit(notice)
        self.snapshot.set(new)

    # --- actions --------------------------------------------------------------------------------
    async def start_model(self, model_id: str) -> None:
        self._put_status(await self.client.start_model(model_id))

    async def stop_model(self, model_id: str) -> None:
        self._put_status(await self.client.stop_model(model_id))

    async def restart_model(self, model_id: str) -> None:
        self._put_status(await self.client.restart_model(model_id))

    async def toggle_model(self, model_id: str) -> None:
        view = self.snapshot.value.model(model_id)
        if view is not None and view.status.state in (ModelState.READY, ModelState.STARTING):
            await self.stop_model(model_id)
        else:
            await self.start_model(model_id)

    async def stop_all(self) -> None:
        running = [m.definition.id for m in self.snapshot.value.models
                   if m.status.state not in (ModelState.STOPPED, ModelState.FAILED)]
        results = await asyncio.gather(*(self.client.stop_model(i) for i in running), return_exceptions=True)
        for result in results:
            if isinstance(result, ModelStatus):
                self._put_status(result)
            elif isinstance(result, BaseException):
                _LOGGER.warning("stop failed: %s", result)

    async def save_model(self, definition: ModelDefinition, *, is_new: bool) -> ModelView:
        view = await (self.client.create_model(definition) if is_new else self.client.update_model(definition))
        self._put(view)
        return view

    async def delete_model(self, model_id: str) -> None:
        await self.client.delete_model(model_id)
        self._drop(model_id)

    async def delete_model_with_files(self, model_id: str) -> ModelRemoval:
        """Delete the model, then its files no other model uses in its node's models folder."""
        removal = await self.client.delete_model_with_files(model_id)
        self._drop(model_id)
        return removal


LOW_DISK = 0.10  # a node's models disk with less free than this is an alert

# The GPU's XID codes people meet, what they mean and what to do (NVIDIA's XID catalogue).
_XIDS = {13: "a graphics engine exception (often a driver or application fault)",
         31: "a memory page fault (often a driver or application fault)",
         43: "a GPU stopped processing (a kernel that hung)",
         48: "a double-bit ECC error (the memory lost data)",
         63: "an ECC page retirement", 64: "an ECC page retirement that failed",
         74: "an NVLink error", 79: "the GPU has fallen off the bus",
         92: "a high single-bit ECC error rate", 94: "a contained ECC error", 95: "an uncontained ECC error"}


@dataclass(frozen=True)
class HostAlert:
    """Something wrong with a node (not a model), for the attention list and the tray."""

    key: str  # stable while the fault lasts: a notification is sent once per key
    node_name: str
    title: str
    what_to_do: str


def host_alerts(hosts: tuple[HostSnapshot, ...]) -> list[HostAlert]:
    """Nodes offline, GPUs that reported XID or uncorrected ECC errors, disks nearly full."""
    alerts = []
    for host in hosts:
        name = host.node_name or host.node[:12]
        if not host.online:
            alerts.append(HostAlert(f"offline:{host.node}", name, f"{name} is offline",
                                    "Its models do not answer. Check that the machine is on and its agent runs "
                                    "(`mirbadllm agent`); the Nodes page says what the daemon last heard."))
            continue
        for gpu in host.gpus:
            if gpu.last_xid is not None and gpu.xid_events:
                meaning = _XIDS.get(gpu.last_xid, "a GPU error")
                alerts.append(HostAlert(f"xid:{host.node}:{gpu.index}:{gpu.xid_events}", name,
                                        f"GPU {gpu.index} on {name} reported XID {gpu.last_xid}: {meaning}",
                                        f"{gpu.xid_events} since its agent started. Restart the models on it; if it "
                                        "comes back, update the driver and check the GPU's power and cooling."))
            uncorrected = gpu.ecc.volatile_uncorrected if gpu.ecc is not None else None
            if uncorrected:
                alerts.append(HostAlert(f"ecc:{host.node}:{gpu.index}", name,
                                        f"GPU {gpu.index} on {name} has {uncorrected} uncorrected ECC errors",
                                        "Its memory lost data: answers computed there may be wrong. Restart its "
                                        "models (a reboot clears the volatile count); if they return, have the GPU "
                                        "checked."))
        if host.disk_total and host.disk_free is not None and host.disk_free < LOW_DISK * host.disk_total:
            percent = 100 * host.disk_free / host.disk_total
            alerts.append(HostAlert(f"disk:{host.node}", name,
                                    f"{name}'s models disk is {100 - percent:.0f}% full",
                                    f"{fmt.size(host.disk_free)} free of {fmt.size(host.disk_total)}: a download or "
                                    "a model's logs may fail. Remove models you no longer use, or free space there."))
    return alerts


def _transitions(old: FleetSnapshot, new: FleetSnapshot) -> list[Notice]:
    before = {m.definition.id: m.status.state for m in old.models}
    notices = []
    if old.hosts and new.hosts is not old.hosts:  # a model's change keeps the hosts: nothing to compare
        known = {a.key for a in host_alerts(old.hosts)}
        notices += [Notice(a.key, a.title, a.what_to_do, failed=True) for a in host_alerts(new.hosts)
                    if a.key not in known]  # not at the first figures (no old hosts): what was already so
    for view in new.models:
        state, was = view.status.state, before.get(view.definition.id)
        if state == was or was is None:
            continue
        name = view.definition.served_name
        if state == ModelState.READY:
            notices.append(Notice(view.definition.id, f"{name} is ready",
                                  f"Serving on {new.api_url} as “{name}”.", failed=False))
        elif state == ModelState.FAILED:
            error = view.status.error or "it stopped unexpectedly"
            notices.append(Notice(view.definition.id, f"{name} failed", error, failed=True))
    return notices


def _keys_warning(status: StatusResponse) -> str | None:
    return status.keys_at_rest.warning if status.keys_at_rest is not None else None
