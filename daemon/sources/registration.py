"""Registering the models a finished download or import put on a node.

Each model found gets an id (the one asked for, else one made from its file name, made unique),
a served name, and ``--mmproj`` when it came with a vision projector; with ``preset="demo"`` the
first model gets the demo model's definition (``daemon.api.demo_model``); with ``settings`` (and
``rpc_nodes``) the first model gets those llama.cpp settings and helpers: the plan option the
add-model wizard picked before the download. A file a model on the same node already uses is not
registered again: the transfer names that model instead (``Transfer.existing``). A model from the
hub records its origin: repository, commit, each file's SHA-256 and size (``daemon.sources.updates``
asks the hub whether they changed). The registry checks every definition as it would one typed by the user (``daemon.validation``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from daemon.api.demo_model import demo_definition
from daemon.api.models import ModelDefinition, ModelSource
from daemon.api.sources import Transfer
from daemon.events import EventBus
from daemon.history import History
from daemon.models.registry import Registry, RegistryError

_SLUG_RE = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class Registered:
    """What registering a finished transfer's models did (``Transfer.registered``, ``.existing``,
    ``.register_error``)."""

    ids: list[str] = field(default_factory=list)
    error: str | None = None
    existing: list[str] = field(default_factory=list)  # models that already ran one of its files


def model_id_from(name: str, taken: set[str]) -> str:
    """A free id matching ``^[a-z0-9][a-z0-9-]{0,39}$`` made from ``name``."""
    base = _SLUG_RE.sub("-", name.lower()).strip("-")[:36].strip("-") or "model"
    candidate, n = base, 2
    while candidate in taken:
        candidate = f"{base}-{n}"
        n += 1
    return candidate


def model_using(registry: Registry, node: str, path: str) -> str | None:
    """The id of a model on ``node`` that runs the file at ``path``, if one does."""
    return next((m.id for m in registry.all() if m.node == node and m.model_path == path), None)


async def register_models(registry: Registry, events: EventBus, history: History, transfer: Transfer,
                          query: Any) -> Registered:
    """Register every model of ``transfer``: the ids registered, the ids of models that already ran
    one of its files (not registered again), and what went wrong, if anything."""
    ids: list[str] = []
    existing: list[str] = []
    problems: list[str] = []
    for n, imported in enumerate(transfer.result):
        already = model_using(registry, transfer.node, imported.model_path)
        if already is not None:
            existing.append(already)
            continue
        taken = {m.id for m in registry.all()}
        wanted = query.model_id if n == 0 and query.model_id and query.model_id not in taken else imported.name
        model_id = model_id_from(wanted, taken)
        served = query.served_name if n == 0 and query.served_name else model_id
        if registry.by_served_name(served) is not None:
            served = model_id
        source = ModelSource(hf_repo=imported.hf_repo, hf_file=imported.hf_file, revision=imported.revision,
                             files=imported.files) if imported.hf_repo else None
        definition = ModelDefinition(
            id=model_id, served_name=served, node=transfer.node, model_path=imported.model_path, sources=source,
            extra_args=["--mmproj", imported.projector_path] if imported.projector_path else [],
            tags=list(query.tags), description=f"Added from {imported.origin}"[:500])
        if n == 0:  # the plan option picked before the download: how it runs, and its helper nodes
            placed = {"settings": getattr(query, "settings", None), "rpc_nodes": list(getattr(query, "rpc_nodes", []))}
            definition = definition.model_copy(update={k: v for k, v in placed.items() if v not in (None, [])})
        if n == 0 and getattr(query, "preset", None) == "demo":
            definition = demo_definition(imported.model_path, node=transfer.node, model_id=model_id, source=source)
            definition = definition.model_copy(update={"served_name": served})
        try:
            await registry.add(definition)
        except RegistryError as exc:
            problems.append(f"{model_id}: {exc.message}")
            continue
        ids.append(model_id)
        events.publish("model.added", model_id)
        await history.audit("admin", "model.add", model_id, f"from transfer {transfer.id}")
    return Registered(ids, "; ".join(problems) or None, existing)
