"""The first-run offer: "Add your first model" while the daemon has none.

Qt-free. An installed program carries no model, so an empty fleet gets two ways in: download the
demo model (Gemma 3 270M, ``daemon.api.demo_model``) from Hugging Face through the daemon's
download path, which registers it with the demo's definition (``preset="demo"``), then start it;
or add a model already on this machine, found in Ollama's store (imported by the daemon) or in
LM Studio's models folders (registered where it is, with ``create_model``). The offer is shown
while the fleet is loaded, connected and empty, and goes away once there is a model.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from app.viewmodels.downloads import byte_share, event_transfer, in_flight
from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.contracts import HfFileRef
from daemon.api.demo_model import (
    DEMO_HF_FILE,
    DEMO_HF_REPO,
    DEMO_MODEL_ID,
    DEMO_SIZE_TEXT,
)
from daemon.api.models import LOCAL_NODE, Event, ModelDefinition
from daemon.api.protocol import DaemonApi
from daemon.api.sources import DownloadQuery, OllamaImportQuery, Transfer

_LOGGER = logging.getLogger(__name__)

FoundKind = Literal["ollama", "lmstudio"]
_SLUG_RE = re.compile(r"[^a-z0-9]+")


def model_id_for(name: str) -> str:
    """An id the registry accepts (``^[a-z0-9][a-z0-9-]{0,39}$``) from a file or model name."""
    return _SLUG_RE.sub("-", name.lower()).strip("-")[:40].strip("-") or "model"


@dataclass(frozen=True)
class FoundModel:
    """A model already on this machine, one row of the offer."""

    kind: FoundKind
    name: str  # what the user knows it as: llama3.2:3b, publisher/model/file.gguf
    size: int = 0
    path: str = ""  # LM Studio: the GGUF; Ollama: empty
    projector_path: str | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def source_text(self) -> str:
        return "Ollama" if self.kind == "ollama" else "LM Studio"


@dataclass(frozen=True)
class FirstRunState:
    offered: bool = False
    scanning: bool = False
    scanned: bool = False
    found: tuple[FoundModel, ...] = ()
    demo_transfer: Transfer | None = None
    adding: frozenset[str] = frozenset()  # keys of found models being added
    added: tuple[str, ...] = ()  # model ids registered from the offer
    error: str | None = None
    demo_title: str = "Get the demo model"
    demo_text: str = f"Gemma 3 270M, Q4_K_M ({DEMO_SIZE_TEXT}) from Hugging Face: small enough for any machine."

    @property
    def downloading(self) -> bool:
        return in_flight(self.demo_transfer)

    @property
    def can_get_demo(self) -> bool:
        return not self.downloading and not (self.demo_transfer is not None and self.demo_transfer.registered)

    @property
    def progress(self) -> float | None:
        return byte_share(self.demo_transfer)

    @property
    def progress_text(self) -> str:
        t = self.demo_transfer
        if t is None:
            return ""
        if t.state.value == "done":
            return "Downloaded; starting " + ", ".join(t.registered) if t.registered else "Downloaded"
        parts = [t.state.value.capitalize()]
        if t.bytes_total:
            parts.append(f"{t.bytes_done / 1e6:.0f} of {t.bytes_total / 1e6:.0f} MB")
        if t.error:
            parts.append(t.error)
        return " — ".join(parts)


class FirstRunViewModel:
    def __init__(self, client: DaemonApi, fleet: FleetViewModel, node: str = LOCAL_NODE) -> None:
        self.client = client
        self.node = node
        self.state: Observable[FirstRunState] = Observable(FirstRunState())
        self._scan_task: asyncio.Future[None] | None = None
        self._unsubscribe = [fleet.events.subscribe(self.on_event),
                             fleet.snapshot.subscribe(self.on_snapshot, now=True)]

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        if self._scan_task is not None:
            self._scan_task.cancel()

    def _set(self, **changes: Any) -> None:
        self.state.set(replace(self.state.value, **changes))

    def on_snapshot(self, snap: FleetSnapshot) -> None:
        offered = snap.loaded and snap.connected and not snap.models
        if offered == self.state.value.offered:
            return
        self._set(offered=offered)
        if offered and not self.state.value.scanned and self._scan_task is None:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (a test building pages without one): scan() is called by hand
            self._scan_task = asyncio.ensure_future(self.scan())

    async def scan(self) -> None:
        """Look for models in Ollama's store and LM Studio's folders on the node."""
        self._set(scanning=True)
        found: list[FoundModel] = []
        try:
            for model in await self.client.ollama_models(self.node):
                found.append(FoundModel("ollama", model.model, model.size))
        except DaemonError as exc:
            _LOGGER.info("no Ollama models: %s", exc.message)
        try:
            for info in await self.client.lmstudio_models(self.node):
                found.append(FoundModel("lmstudio", info.model, info.size, info.path, info.projector_path))
        except DaemonError as exc:
            _LOGGER.info("no LM Studio models: %s", exc.message)
        # Nothing found is the normal case on a new machine; a failed look is only logged.
        self._set(scanning=False, scanned=True, found=tuple(found))
        self._scan_task = None

    async def get_demo(self) -> None:
        """Download the demo model; the daemon registers it when done, then it is started."""
        if not self.state.value.can_get_demo:
            return
        self._set(error=None)
        query = DownloadQuery(node=self.node, hf=HfFileRef(repo=DEMO_HF_REPO, file=DEMO_HF_FILE),
                              with_projector=False, model_id=DEMO_MODEL_ID, served_name=DEMO_MODEL_ID,
                              preset="demo")
        try:
            transfer = await self.client.download(query)
        except DaemonError as exc:
            self._set(error=exc.message)
            return
        self._set(demo_transfer=transfer)
        await self._finished(transfer)

    async def cancel_demo(self) -> None:
        t = self.state.value.demo_transfer
        if t is not None and self.state.value.downloading:
            try:
                self._set(demo_transfer=await self.client.cancel_transfer(t.id))
            except DaemonError as exc:
                self._set(error=exc.message)

    async def add_found(self, key: str) -> None:
        """Add one found model: import it from Ollama, or register the LM Studio file where it is."""
        s = self.state.value
        model = next((m for m in s.found if m.key == key), None)
        if model is None or key in s.adding:
            return
        self._set(adding=s.adding | {key}, error=None)
        try:
            if model.kind == "ollama":
                await self.client.import_ollama(OllamaImportQuery(node=self.node, model=model.name))
                return  # registered by the daemon when the import is done: the fleet shows it
            model_id = model_id_for(os.path.basename(model.path).removesuffix(".gguf"))
            view = await self.client.create_model(ModelDefinition(
                id=model_id, served_name=model_id, node=self.node, model_path=model.path,
                extra_args=["--mmproj", model.projector_path] if model.projector_path else [],
                tags=["lmstudio"], description=f"Added from LM Studio: {model.name}"[:500]))
            self._set(added=self.state.value.added + (view.definition.id,))
        except (DaemonError, ValueError) as exc:
            self._set(adding=self.state.value.adding - {key}, error=getattr(exc, "message", str(exc)))

    def on_event(self, event: Event) -> None:
        t = self.state.value.demo_transfer
        transfer = event_transfer(event, t) if t is not None else None
        if transfer is None:
            return
        if event.type == "transfer.state":
            self._set(demo_transfer=transfer, error=transfer.error or transfer.register_error)
            if transfer.state.value == "done" and transfer.registered:
                asyncio.ensure_future(self._finished(transfer))
        else:
            self._set(demo_transfer=transfer)

    async def _finished(self, transfer: Transfer) -> None:
        """Start the models a finished demo download registered, so the user sees them get ready."""
        if transfer.state.value != "done" or not transfer.registered:
            return
        for model_id in transfer.registered:
            if model_id in self.state.value.added:
                continue
            self._set(added=self.state.value.added + (model_id,))
            try:
                await self.client.start_model(model_id)
            except DaemonError as exc:
                self._set(error=exc.message)
