"""The Downloads page's view-model: every transfer the daemon owns, live, and the verbs on one.

The daemon owns the list (``GET /api/transfers``, ``daemon.sources.downloads``): hub and URL downloads,
Ollama, LM Studio and folder imports, mirror pushes to a node, running, paused and the newest
finished ones. So a download started in the add-model dialog goes on after the dialog closes, and
the page shows it again after the app restarts. ``transfer.state`` and ``transfer.progress`` events
(the fleet's feed) keep the rows current between reads; pause, resume, cancel and retry answer with
the transfer as it is now, and a refusal (a done one has nothing to resume) is the page's error line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from app import format as fmt
from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observable import Observable, Unsubscribe
from daemon.api.client import DaemonError
from daemon.api.contracts import TransferState
from daemon.api.models import Event
from daemon.api.protocol import DaemonApi
from daemon.api.sources import Transfer

_LOGGER = logging.getLogger(__name__)

KIND_TEXT = {"hf": "Hugging Face", "url": "Download", "ollama": "Ollama import", "folder": "Folder import",
             "mirror": "Mirror push"}
PROGRESS_FIELDS = ("stage", "bytes_done", "bytes_total", "speed_bps", "eta_s")
ACTIVE = (TransferState.QUEUED, TransferState.RUNNING)


@dataclass(frozen=True)
class DownloadsState:
    transfers: tuple[Transfer, ...] = ()  # the newest first
    loaded: bool = False
    selected: str | None = None
    error: str | None = None  # the last refused verb or failed read
    node_names: dict[str, str] = field(default_factory=dict)  # node id -> its name

    @property
    def selected_transfer(self) -> Transfer | None:
        return next((t for t in self.transfers if t.id == self.selected), None)

    @property
    def running(self) -> int:
        return sum(1 for t in self.transfers if in_flight(t))


def in_flight(t: Transfer | None) -> bool:
    """Queued or running: the transfer is still on its way (paused or finished ones are not)."""
    return t is not None and t.state in ACTIVE


def actions(t: Transfer | None) -> frozenset[str]:
    """The verbs the daemon takes for this transfer now."""
    if t is None:
        return frozenset()
    if in_flight(t):
        return frozenset({"pause", "cancel"} if t.pausable else {"cancel"})
    if t.state == TransferState.PAUSED:
        return frozenset({"resume", "cancel"})
    if t.state in (TransferState.FAILED, TransferState.CANCELLED) and t.pausable:
        return frozenset({"retry"})
    return frozenset()


def where(t: Transfer, names: dict[str, str]) -> str:
    name = names.get(t.node) or (t.node if len(t.node) < 20 else t.node[:12] + "…")
    return f"to {name}" if t.kind == "mirror" else name


def byte_share(t: Transfer | None) -> float | None:
    """The share of ``t``'s bytes in (a progress bar's value); None: no transfer, or its size unknown."""
    if t is None or not t.bytes_total:
        return None
    return min(1.0, t.bytes_done / t.bytes_total)


def event_transfer(event: Event, known: Transfer | None = None) -> Transfer | None:
    """The transfer a ``transfer.state`` or ``transfer.progress`` event tells of, as it is now: a state
    event carries it whole, a progress event updates ``known``'s figures. None: an event about another
    transfer than ``known``, a progress event with nothing known, an unreadable one, or another event."""
    if event.type == "transfer.state":
        data = event.data.get("transfer", event.data)  # the in-memory daemon nests it
        if known is not None and data.get("id") != known.id:
            return None
        try:
            return Transfer.model_validate(data)
        except ValueError as exc:
            _LOGGER.debug("an unreadable transfer event: %s", exc)
            return None
    if event.type == "transfer.progress" and known is not None and event.data.get("id") == known.id:
        return known.model_copy(update={k: event.data[k] for k in PROGRESS_FIELDS if k in event.data})
    return None


def fraction(t: Transfer) -> float | None:
    return 1.0 if t.state == TransferState.DONE else byte_share(t)


def progress_text(t: Transfer) -> str:
    """Bytes so far, of how many; a stage while there are none to count."""
    if t.bytes_total:
        return f"{fmt.size(t.bytes_done)} of {fmt.size(t.bytes_total)}"
    if t.bytes_done:
        return fmt.size(t.bytes_done)
    return t.stage.capitalize() if in_flight(t) and t.stage else ""


def state_text(t: Transfer) -> str:
    text = t.state.value.capitalize()
    if t.state == TransferState.FAILED and t.error:
        return f"Failed: {t.error}"
    if t.state == TransferState.DONE and t.registered:
        return f"Done: added {', '.join(t.registered)}"
    if t.state == TransferState.RUNNING and t.stage and t.stage != "downloading":
        return f"{text} ({t.stage})"
    return text


def row_cells(t: Transfer, names: dict[str, str]) -> tuple[str, str, str, str, str, str]:
    """Label, kind, node, state, speed and time left: the page's table row (progress has a bar of its own)."""
    speed = f"{fmt.size(t.speed_bps)}/s" if t.speed_bps else "—"
    eta = fmt.duration(t.eta_s) if t.eta_s is not None else "—"
    return t.label, KIND_TEXT.get(t.kind, t.kind), where(t, names), state_text(t), speed, eta


class DownloadsViewModel:
    def __init__(self, client: DaemonApi, fleet: FleetViewModel) -> None:
        self._client = client
        self.state: Observable[DownloadsState] = Observable(DownloadsState())
        self._unsubscribe: Unsubscribe | None = fleet.events.subscribe(self.on_event)

    def _set(self, **changes: object) -> None:
        self.state.set(replace(self.state.value, **changes))  # type: ignore[arg-type]

    async def refresh(self) -> None:
        try:
            found = await self._client.transfers()
            nodes = await self._client.list_nodes()
        except DaemonError as exc:
            self._set(error=f"Could not read the downloads: {exc.message}", loaded=True)
            return
        self._set(transfers=tuple(sorted(found, key=lambda t: t.created_at, reverse=True)), loaded=True,
                  node_names={n.id: n.name for n in nodes})

    def select(self, transfer_id: str | None) -> None:
        self._set(selected=transfer_id)

    def _put(self, transfer: Transfer) -> None:
        rows = list(self.state.value.transfers)
        at = next((n for n, t in enumerate(rows) if t.id == transfer.id), None)
        if at is None:
            rows.insert(0, transfer)
        else:
            rows[at] = transfer
        self._set(transfers=tuple(rows))

    def on_event(self, event: Event) -> None:
        known = next((t for t in self.state.value.transfers if t.id == event.data.get("id")), None)
        transfer = event_transfer(event, known)
        if transfer is not None:
            self._put(transfer)

    async def _verb(self, call: Callable[[str], Awaitable[Transfer]], transfer_id: str) -> None:
        self._set(error=None)
        try:
            self._put(await call(transfer_id))
        except DaemonError as exc:
            self._set(error=exc.message)

    async def pause(self, transfer_id: str) -> None:
        await self._verb(self._client.pause_transfer, transfer_id)

    async def resume(self, transfer_id: str) -> None:
        await self._verb(self._client.resume_transfer, transfer_id)

    async def cancel(self, transfer_id: str) -> None:
        await self._verb(self._client.cancel_transfer, transfer_id)

    async def retry(self, transfer_id: str) -> None:
        await self._verb(self._client.retry_transfer, transfer_id)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
