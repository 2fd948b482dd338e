"""The add-model wizard's LM Studio tab: the GGUFs of LM Studio's folders on a node, picked and imported.

Qt-free. The node's agent lists the models of LM Studio's folders (``~/.lmstudio/models``, the older
``~/.cache/lm-studio/models``, and a folder the user picks, of the same ``publisher/model/file.gguf``
layout); each row says its size, its quant, whether a vision projector comes with it (attached, never
a row of its own) and the model that already runs it (``DaemonApi.lmstudio_models``). Several are
picked and imported at once (``DaemonApi.import_lmstudio``): the daemon registers the files where they
lie; a file registered before is named in the transfer's ``existing``, not added again. When the
import is done the list is asked again, so each row says what it is added as.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

from app.viewmodels.downloads import event_transfer, in_flight
from app.viewmodels.observable import Emitter, Observable
from daemon.api.client import DaemonError
from daemon.api.models import Event
from daemon.api.protocol import DaemonApi
from daemon.api.sources import LmStudioImportQuery, LmStudioModel, Transfer

_LOGGER = logging.getLogger(__name__)
GiB = 1 << 30


def size_text(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB // 10 else f"{n / 2**20:.1f} MiB"


def row_text(m: LmStudioModel) -> str:
    """``file.gguf — Q4_K_M, 2.50 GiB, with vision projector — added as 'x' (publisher/model)``: what
    tells models apart first, where LM Studio keeps it last."""
    folder, _, name = m.model.rpartition("/")
    facts = [m.quant or "quant not named", size_text(m.size)] + (["with vision projector"] if m.projector_path else [])
    added = f" — added as '{m.registered_as}'" if m.registered_as else ""
    return f"{name} — {', '.join(facts)}{added}" + (f"  ({folder})" if folder else "")


@dataclass(frozen=True)
class LmStudioImportState:
    node: str = "local"
    folder: str = ""  # a models folder of LM Studio's layout on the node, besides its own; empty: none
    listed: tuple[LmStudioModel, ...] = ()
    selected: frozenset[str] = frozenset()  # paths of the rows picked
    loading: bool = False
    loaded: bool = False
    busy: bool = False
    transfer: Transfer | None = None
    error: str | None = None

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(row_text(m) for m in self.listed)

    @property
    def running(self) -> bool:
        return in_flight(self.transfer)

    @property
    def can_import(self) -> bool:
        return bool(self.selected) and not self.busy and not self.running and not self.loading

    @property
    def empty_text(self) -> str:
        """What the list says when it has no row."""
        if self.loading:
            return "Looking in LM Studio's folders…"
        if not self.loaded:
            return ""
        where = f" or in {self.folder}" if self.folder.strip() else ""
        return f"No GGUF models in LM Studio's folders on this node{where}."

    @property
    def status_text(self) -> str:
        """The import's progress and outcome: what was added, and what already was."""
        t = self.transfer
        if t is None:
            return ""
        if in_flight(t):
            return f"Importing {t.label}…"
        parts = [] if t.state.value == "done" else [f"{t.state.value.capitalize()}: {t.error or 'no reason given'}"]
        if t.registered:
            parts.append("Added " + ", ".join(f"'{i}'" for i in t.registered))
        for model_id in t.existing:
            parts.append(f"already added as model '{model_id}' (not added again)")
        if t.register_error:
            parts.append(f"not added: {t.register_error}")
        return "; ".join(parts) or "Nothing added."


class LmStudioImportViewModel:
    def __init__(self, client: DaemonApi, events: Emitter[Event] | None = None) -> None:
        """``events``: the fleet's event emitter, for the import's progress."""
        self.client = client
        self.state: Observable[LmStudioImportState] = Observable(LmStudioImportState())
        self._unsubscribe = events.subscribe(self.on_event) if events is not None else (lambda: None)
        self._reload: asyncio.Future[None] | None = None

    def close(self) -> None:
        self._unsubscribe()
        if self._reload is not None:
            self._reload.cancel()

    def _set(self, **changes: Any) -> None:
        self.state.set(replace(self.state.value, **changes))

    def set_node(self, node: str) -> None:
        """Another node: its own LM Studio folders, listed afresh."""
        node = node.strip() or "local"
        if node != self.state.value.node:
            self._set(node=node, listed=(), selected=frozenset(), loaded=False, error=None)

    def set_folder(self, folder: str) -> None:
        self._set(folder=folder, error=None)

    def set_selected(self, paths: set[str] | frozenset[str]) -> None:
        """Pick rows by their files; a path not listed is ignored."""
        listed = {m.path for m in self.state.value.listed}
        self._set(selected=frozenset(p for p in paths if p in listed))

    def look_once(self) -> None:
        """Look on the node unless a look is under way or done (the tab shown, or shown again after
        the node changed)."""
        s = self.state.value
        if s.loaded or s.loading:
            return
        self._set(loading=True)  # at once: a second call before the look starts is a no-op
        self._reload = asyncio.ensure_future(self.load())

    async def load(self) -> None:
        """Ask the node for the models of LM Studio's folders (and the picked folder)."""
        s = self.state.value
        self._set(loading=True, error=None)
        try:
            listed = await self.client.lmstudio_models(s.node, s.folder.strip() or None)
        except DaemonError as exc:
            self._set(loading=False, loaded=True, listed=(), selected=frozenset(), error=exc.message)
            return
        paths = {m.path for m in listed}
        self._set(loading=False, loaded=True, listed=tuple(listed),
                  selected=frozenset(p for p in self.state.value.selected if p in paths))

    async def import_selected(self) -> None:
        """Import the picked rows: registered where they lie, each with its projector."""
        s = self.state.value
        if not s.can_import:
            return
        paths = [m.path for m in s.listed if m.path in s.selected]
        self._set(busy=True, error=None, transfer=None)
        try:
            transfer = await self.client.import_lmstudio(LmStudioImportQuery(
                node=s.node, folder=s.folder.strip() or None, paths=paths))
        except DaemonError as exc:
            self._set(busy=False, error=exc.message)
            return
        self._set(busy=False, transfer=transfer)
        if not self.state.value.running:  # finished at once: the rows say what they are added as
            await self._finished()

    async def _finished(self) -> None:
        self._set(selected=frozenset())
        await self.load()

    def on_event(self, event: Event) -> None:
        t = self.state.value.transfer
        transfer = event_transfer(event, t) if t is not None and event.type == "transfer.state" else None
        if transfer is None:
            return
        was_running = self.state.value.running
        self._set(transfer=transfer, error=transfer.error)
        if was_running and not self.state.value.running:
            self._reload = asyncio.ensure_future(self._finished())
