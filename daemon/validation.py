"""Hostile definitions refused when they are saved, before any node is asked to run them.

``check_definition`` applies the rules the agents apply again at start (``agent.api.launch_policy``
and ``core.safe_names``), judging paths by their text because the files live on the node:
an absolute model path without ``..``, UNC or NUL; runtime arguments that stay inside the model's
folder and open nothing to the network; environment variables from the allowlist only; sources
whose repo, revision and file name cannot escape a folder. The registry calls it on add and update,
and places the model with ``resolve_node``: on a node that exists, named by id, id prefix or name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from urllib.parse import urlsplit

from agent.api.launch_policy import (
    PolicyViolation,
    check_env,
    check_extra_args,
    check_mlx_settings,
    check_vllm_settings,
)
from agent.api.mlx import MlxSettings, served_name_problem
from agent.api.runtimes import profile
from agent.api.vllm import VllmSettings
from core.safe_names import (
    UnsafeName,
    check_hf_repo,
    check_hf_revision,
    check_node_path,
    check_relative_name,
)
from daemon.api.models import AUTO_NODE, LOCAL_NODE, ModelDefinition

_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
MAX_TAGS = 32
MIN_ID_PREFIX = 4


class DefinitionRejected(ValueError):
    """A definition the daemon will not store; the message names the field and the reason."""


class UnknownNode(DefinitionRejected):
    """The definition's node is none of the nodes the daemon knows."""


MAX_FALLBACK_CHAIN = 16


def _external_fields(definition: ModelDefinition) -> list[str]:
    return [name for name in ("base_url", "provider_model", "api_key_file") if getattr(definition, name) is not None]


def check_external(definition: ModelDefinition) -> None:
    """An external endpoint: an http(s) URL with a host (no credentials, query or fragment in it), the
    provider's model name, and a key file that exists and is readable now (refused, not warned: the
    file is on this machine, and a typo is better said at save than at the first request). Nothing
    of the runtimes' (arguments, environment, sources) applies."""
    if profile(definition.runtime).on_node:
        raise DefinitionRejected(f"{', '.join(_external_fields(definition))}: only for runtime 'external'")
    url = definition.base_url
    if not url:
        raise DefinitionRejected("base_url: an external model needs the server's base URL (http:// or https://)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or _CONTROL_RE.search(url) or " " in url:
        raise DefinitionRejected(f"base_url: '{url[:200]}' is not an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise DefinitionRejected("base_url: no credentials, query or fragment in it (the key goes in api_key_file)")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise DefinitionRejected(f"base_url: {exc}") from None
    if not definition.provider_model or _CONTROL_RE.search(definition.provider_model):
        raise DefinitionRejected("provider_model: the model name the server knows (printable text)")
    key_file = definition.api_key_file
    if key_file is not None:
        if not os.path.isabs(key_file) or "\x00" in key_file:
            raise DefinitionRejected("api_key_file: an absolute path on the daemon's machine")
        if not os.path.isfile(key_file) or not os.access(key_file, os.R_OK):
            raise DefinitionRejected(f"api_key_file: '{key_file}' is not a readable file on the daemon's machine")
    if definition.extra_args or definition.env or definition.sources is not None:
        raise DefinitionRejected("extra_args, env and sources do not apply to an external model")


def check_fallbacks(definition: ModelDefinition, others: Iterable[ModelDefinition]) -> None:
    """Each fallback names another model (served name or id); no chain of fallbacks comes back to
    ``definition`` (``others`` are the stored models; ``definition`` replaces its stored self)."""
    models = {m.id: m for m in others if m.id != definition.id}
    models[definition.id] = definition

    def find(name: str) -> ModelDefinition | None:
        wanted = name.casefold()
        return models.get(name) or next((m for m in models.values() if m.served_name.casefold() == wanted), None)

    for name in definition.fallbacks:
        target = find(name)
        if target is None:
            raise DefinitionRejected(f"fallbacks: no model is named '{name[:128]}'")
        if target.id == definition.id:
            raise DefinitionRejected(f"fallbacks: '{name[:128]}' is this model itself")

    def walk(model: ModelDefinition, path: list[str]) -> None:
        if len(path) > MAX_FALLBACK_CHAIN:
            raise DefinitionRejected(f"fallbacks: a chain longer than {MAX_FALLBACK_CHAIN} models")
        for name in model.fallbacks:
            target = find(name)
            if target is None:
                continue
            if target.id == definition.id:
                cycle = " -> ".join([*path, definition.id])
                raise DefinitionRejected(f"fallbacks: a cycle ({cycle})")
            if target.id not in path:
                walk(target, [*path, target.id])

    walk(definition, [definition.id])


def resolve_node(node: str, known: Mapping[str, str]) -> str:
    """The full id of the node that ``node`` names, given ``known`` (id -> name): its id, a unique id
    prefix (``ctl nodes list`` shows 12 characters) or its name (case-insensitive); ``auto`` stays
    ``auto`` (the orchestrator places the model at each start)."""
    if node in known or node == AUTO_NODE:
        return node
    wanted = node.strip().casefold()
    for candidates in ([i for i, name in known.items() if name.casefold() == wanted],
                       [i for i in known if len(wanted) >= MIN_ID_PREFIX and i.startswith(wanted)]):
        if len(candidates) == 1:
            return candidates[0]
        if len(candidates) > 1:
            raise UnknownNode(f"node '{node}' is ambiguous: it names {len(candidates)} nodes; use the full id. "
                              f"Known nodes: {_listing(known)}")
    raise UnknownNode(f"node '{node}' is unknown. Known nodes: {_listing(known)}")


def _listing(known: Mapping[str, str]) -> str:
    return ", ".join(f"{name} (id {node_id})" for node_id, name in known.items()) or "none (pair one first)"


def resolve_rpc_nodes(definition: ModelDefinition, known: Mapping[str, str],
                      lends: Callable[[str], bool | None] | None = None) -> list[str]:
    """The full ids of the helper nodes ``definition.rpc_nodes`` names (one model across nodes,
    llama.cpp RPC): each a paired node that exists, named once, not the model's own node (this
    machine's agent, ``local``, may be the main but not a helper: it listens on loopback); the
    model's node named, not ``auto``. A helper
    whose agent says it has no rpc-server (``lends`` answers False) is refused; one that does not
    say now (offline, older) does not block a save, as with runtimes."""
    if not definition.rpc_nodes:
        return []
    if not profile(definition.runtime).spreads_over_nodes:
        raise DefinitionRejected(f"rpc_nodes: only llama.cpp runs a model across nodes, not {definition.runtime}")
    if definition.node == AUTO_NODE:
        raise DefinitionRejected("rpc_nodes: name the model's node (the main node that runs it and holds "
                                 "its first layers), not 'auto'")
    helpers: list[str] = []
    for name in definition.rpc_nodes:
        try:
            node = resolve_node(name, known)
        except UnknownNode as exc:
            raise UnknownNode(f"rpc_nodes: {exc}") from None
        if node == AUTO_NODE:
            raise DefinitionRejected(f"rpc_nodes: '{name[:64]}' cannot lend memory: name paired nodes")
        if node == LOCAL_NODE:
            raise DefinitionRejected(f"rpc_nodes: '{name[:64]}' is this machine's own agent, which listens on "
                                     "127.0.0.1 only, so no other node can reach it to use its memory; make it the "
                                     "model's node (the main) and name paired nodes as helpers")
        if node == definition.node:
            raise DefinitionRejected(f"rpc_nodes: '{name[:64]}' is the model's own node; name the other nodes "
                                     "that hold part of it")
        if node in helpers:
            raise DefinitionRejected(f"rpc_nodes: '{name[:64]}' is named twice")
        if lends is not None and lends(node) is False:
            raise DefinitionRejected(f"rpc_nodes: node '{known.get(node, node)}' has no llama.cpp rpc-server "
                                     "(its llama.cpp build was made without GGML_RPC): update its runtime")
        helpers.append(node)
    return helpers


def check_definition(definition: ModelDefinition) -> None:
    """Raise ``DefinitionRejected`` naming the first field that reaches beyond its model."""
    if _CONTROL_RE.search(definition.served_name):
        raise DefinitionRejected("served_name contains a control character")
    if definition.rpc_nodes and not profile(definition.runtime).spreads_over_nodes:
        raise DefinitionRejected(f"rpc_nodes: only llama.cpp runs a model across nodes, not {definition.runtime}")
    if definition.adapters:
        check_adapters(definition)
    if not profile(definition.runtime).on_node or _external_fields(definition):
        check_external(definition)
        if len(definition.tags) > MAX_TAGS or any(_CONTROL_RE.search(t) or len(t) > 64 for t in definition.tags):
            raise DefinitionRejected(f"tags: at most {MAX_TAGS}, each up to 64 printable characters")
        return
    try:
        check_node_path(definition.model_path)
    except UnsafeName as exc:
        raise DefinitionRejected(str(exc)) from exc
    try:
        check_extra_args(definition.extra_args, definition.model_path,
                         runtime=definition.runtime)
    except PolicyViolation as exc:
        raise DefinitionRejected(f"extra_args: {exc}") from exc
    own = definition.runtime_settings
    if isinstance(own, MlxSettings):
        try:
            check_mlx_settings(own, definition.model_path)
        except PolicyViolation as exc:
            raise DefinitionRejected(f"mlx: {exc}") from exc
        if (problem := served_name_problem(definition.served_name)) is not None:
            raise DefinitionRejected(problem)
    if isinstance(own, VllmSettings):
        try:
            check_vllm_settings(own, definition.extra_args)
        except PolicyViolation as exc:
            raise DefinitionRejected(f"vllm: {exc}") from exc
    try:
        check_env(definition.env, runtime=definition.runtime)
    except PolicyViolation as exc:
        raise DefinitionRejected(f"env: {exc}") from exc
    source = definition.sources
    if source is not None:
        try:
            if source.hf_repo is not None:
                check_hf_repo(source.hf_repo)
            if source.revision is not None:
                check_hf_revision(source.revision)
            if source.hf_file is not None:
                check_relative_name(source.hf_file, "sources.hf_file")
        except UnsafeName as exc:
            raise DefinitionRejected(f"sources: {exc}") from exc
    if definition.pinned and definition.model_class == "opportunistic":
        raise DefinitionRejected("pinned: an opportunistic model is the first unloaded to make room; "
                                 "pin a standard or critical one, or leave it unpinned")
    if len(definition.tags) > MAX_TAGS or any(_CONTROL_RE.search(t) or len(t) > 64 for t in definition.tags):
        raise DefinitionRejected(f"tags: at most {MAX_TAGS}, each up to 64 printable characters")


def check_adapters(definition: ModelDefinition) -> None:
    """LoRA adapters judged by their text: llama.cpp only, each a file in the model's folder (the
    agent reads each header at start and refuses one that is not a LoRA for the model's
    architecture), under a name no other served name of this model takes. Names against other
    models are the registry's check."""
    if not profile(definition.runtime).takes_adapters:
        raise DefinitionRejected(f"adapters: only llama.cpp takes LoRA adapters, not {definition.runtime}")
    seen = {definition.served_name.casefold()}
    for adapter in definition.adapters:
        where = f"adapters: '{adapter.name[:128]}'"
        if _CONTROL_RE.search(adapter.name):
            raise DefinitionRejected(f"{where}: the name contains a control character")
        if adapter.name.casefold() in seen:
            raise DefinitionRejected(f"{where}: the name is already a served name of this model")
        seen.add(adapter.name.casefold())
        if "," in adapter.file:
            raise DefinitionRejected(f"{where}: a file name with ',' is not allowed "
                                     "(llama-server splits --lora at commas)")
        try:
            check_node_path(adapter.file)
            check_extra_args(["--lora", adapter.file], definition.model_path, runtime="llamacpp")
        except (UnsafeName, PolicyViolation) as exc:
            raise DefinitionRejected(f"{where}: {exc}") from exc
