"""The Models page's own state: which tag filters the list and which model's panel is open.

It also says how long a ready model has been up, against its own clock: a snapshot changes only
when something happens, so a figure computed when it arrived ("Uptime 2 s", at the ready event)
would stand still; the panel asks again every second. ``runtime_badge`` is the text of the badge
that says which runtime a model runs on (and the version it is pinned to), in the list and the panel.
``updates`` holds each hub model's update state (``app.viewmodels.model_updates``): a row's update badge.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from app import format as fmt
from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.model_updates import ModelUpdatesViewModel
from app.viewmodels.observable import Observable
from daemon.api.contracts import RUNTIME_LABELS
from daemon.api.model_updates import ModelUpdate
from daemon.api.models import ModelDefinition, ModelState, ModelView

ALL_TAGS = ""
_VERSION_CHARS = 24


def short_version(version: str) -> str:
    """A pin short enough for a badge: an image digest as its first 12 hex digits."""
    if "sha256:" in version:
        return "sha256:" + version.split("sha256:", 1)[1][:12]
    return version if len(version) <= _VERSION_CHARS else version[:_VERSION_CHARS - 1] + "…"


def runtime_badge(definition: ModelDefinition) -> tuple[str, str]:
    """The runtime badge's text ("llama.cpp", "vLLM 0.8.5") and its tooltip (the full pin)."""
    name = RUNTIME_LABELS.get(definition.runtime, definition.runtime)
    pin = definition.runtime_version
    if not pin:
        return name, f"Runs on {name}; any version"
    return f"{name} {short_version(pin)}", f"Runs on {name}, pinned to {pin}"


@dataclass(frozen=True)
class ModelsPageState:
    tag: str = ALL_TAGS
    selected_id: str | None = None
    tags: tuple[str, ...] = ()
    models: tuple[ModelView, ...] = ()
    draft: ModelDefinition | None = None  # a model being added, not yet saved
    connected: bool = True  # the daemon answers; else the states shown are stale, and said to be unknown
    updates: Mapping[str, ModelUpdate] = field(default_factory=lambda: MappingProxyType({}))  # by model id

    @property
    def selected(self) -> ModelView | None:
        return next((m for m in self.models if m.definition.id == self.selected_id), None)


class ModelsPageViewModel:
    def __init__(self, fleet: FleetViewModel, *, clock: Callable[[], float] = time.time) -> None:
        self.fleet = fleet
        self.clock = clock  # wall-clock seconds, as the agent's ``started_at``
        self.state: Observable[ModelsPageState] = Observable(ModelsPageState())
        self.updates = ModelUpdatesViewModel(fleet)
        fleet.snapshot.subscribe(self._on_fleet, now=True)
        self.updates.state.subscribe(lambda found: self.state.set(replace(self.state.value, updates=found)))

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        self._derive(self.state.value, snapshot)

    def _derive(self, state: ModelsPageState, snapshot: FleetSnapshot) -> None:
        tag = state.tag if state.tag in snapshot.tags else ALL_TAGS
        models = tuple(m for m in snapshot.models if not tag or tag in m.definition.tags)
        selected = state.selected_id
        if state.draft is None and (selected is None or not any(m.definition.id == selected for m in models)):
            selected = models[0].definition.id if models else None
        self.state.set(replace(state, tag=tag, tags=snapshot.tags, models=models, selected_id=selected,
                               connected=snapshot.connected or not snapshot.loaded))

    def set_tag(self, tag: str) -> None:
        self._derive(replace(self.state.value, tag=tag), self.fleet.snapshot.value)

    def select(self, model_id: str | None) -> None:
        self._derive(replace(self.state.value, selected_id=model_id, draft=None), self.fleet.snapshot.value)

    def new_draft(self, source: ModelDefinition | None = None) -> ModelDefinition:
        """A definition to edit before it exists: blank, or a duplicate of ``source``."""
        taken = {m.definition.id for m in self.fleet.snapshot.value.models}
        if source is None:
            draft = ModelDefinition(id=_free_id("new-model", taken), served_name="new-model",
                                    model_path="/path/to/model.gguf")
        else:
            new_id = _free_id(f"{source.id[:34]}-copy", taken)
            draft = source.model_copy(update={"id": new_id, "served_name": f"{source.served_name}-copy",
                                              "auto_start": False})
        self.state.set(replace(self.state.value, draft=draft, selected_id=None))
        return draft

    def saved(self, model_id: str) -> None:
        self.select(model_id)

    def uptime(self, view: ModelView | None) -> str:
        """How long a ready model's runtime has been running, now (not when the snapshot came)."""
        status = view.status if view is not None else None
        if status is None or status.state != ModelState.READY or status.started_at is None:
            return "—"
        return fmt.duration(self.clock() - status.started_at)


def _free_id(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"
