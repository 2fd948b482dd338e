"""The runtimes an agent can drive, and what a node says about each: the contracts both sides share.

``RuntimeId`` names a driver: ``llamacpp`` (llama.cpp's ``llama-server``, a native process),
``vllm`` (vLLM's OpenAI server in a Docker container, Linux nodes with a Docker engine) and ``mlx``
(``mlx_lm.server``, a native process on Apple Silicon). ``external`` is no driver: an
OpenAI-compatible server somewhere else that the daemon's router calls itself (``daemon.models.external``);
no agent runs it, offers it or accepts a launch spec for it. ``PROFILES`` is the one registry of
what each runtime is and can do (``profile(runtime)``): code asks it, never compares ids. A runtime's
settings are one member of ``RuntimeSettings`` (a union told apart by each member's ``runtime`` tag);
``settings_of(definition)`` (``ModelDefinition.runtime_settings``, ``LaunchSpec.runtime_settings``) is the one
way to the settings of a model's own runtime. Every agent reports each driver it has as a
``RuntimeOffer`` (``AgentStatus.runtime_offers``, ``/api/nodes``' ``runtimes``): available or not,
the version it really is, where it is, and why it is unavailable when it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from agent.api.backends import BackendState
from agent.api.llamacpp import LlamaCppSettings
from agent.api.mlx import MlxSettings
from agent.api.vllm import VllmSettings

RuntimeId = Literal["llamacpp", "vllm", "mlx", "external"]
# The runtimes an agent drives (a node offers each or says why not); ``external`` is none of them.
RUNTIMES: tuple[RuntimeId, ...] = ("llamacpp", "vllm", "mlx")
EXTERNAL: RuntimeId = "external"
LLAMACPP: RuntimeId = "llamacpp"  # its builds carry the GPU backends (agent.api.backends)


@dataclass(frozen=True)
class RuntimeProfile:
    """What one runtime is and can do. Code asks its profile (``profile(runtime).reads_gguf``) rather
    than comparing runtime ids; a new runtime is a new profile here, not a new branch in every file."""

    id: RuntimeId
    label: str
    on_node: bool = True  # an agent runs it on a node; False: an endpoint the daemon's router calls itself
    default: bool = False  # what a model runs on unless it says otherwise (``DEFAULT_RUNTIME``): exactly one
    reads_gguf: bool = False  # one .gguf file: fit and plans read its header, its files are checked on save
    takes_folder: bool = False  # a model folder (safetensors, MLX) is what it loads
    spreads_over_nodes: bool = False  # lends layers to other nodes' rpc-servers (``rpc_nodes``)
    takes_adapters: bool = False  # LoRA adapters applied per request
    gpu_backends: bool = False  # its portable builds carry the GPU backends (upgraded and packed per node)
    container: bool = False  # runs from an image in the node's Docker engine
    unified_memory: bool = False  # runs in Apple Silicon's memory shared by CPU and GPU
    reserves_gpu_share: bool = False  # takes a fixed share of each GPU up front (vLLM's gpu_memory_utilization)
    context_setting: str | None = None  # the setting that caps its context (llama.cpp ctx_size, vLLM max_model_len)
    tunable: bool = False  # the tuning wizard has a search space for it
    prompt_progress: bool = False  # says how far it read a prompt (llama-server's /slots): a wedged one is cut
    flags_lifted: bool = False  # typed flags in extra_args are moved into its settings' fields
    settings_field: str | None = None  # the model definition's field holding its settings
    executable: str = ""  # what runs it, as people know it
    # A preset's sampling fields (daemon.api.models.Preset) and the request field it sets on this runtime;
    # a field it does not know is left out (an external OpenAI server refuses unknown ones).
    sampling: tuple[tuple[str, str], ...] = (("temperature", "temperature"), ("top_p", "top_p"),
                                             ("max_tokens", "max_tokens"))


_SAMPLING = (("temperature", "temperature"), ("top_p", "top_p"), ("max_tokens", "max_tokens"))
PROFILES: dict[RuntimeId, RuntimeProfile] = {p.id: p for p in (
    RuntimeProfile("llamacpp", "llama.cpp", default=True, reads_gguf=True, spreads_over_nodes=True, takes_adapters=True,
                   gpu_backends=True, tunable=True, flags_lifted=True, settings_field="settings", prompt_progress=True,
                   context_setting="ctx_size", executable="llama-server", sampling=_SAMPLING + (
                       ("top_k", "top_k"), ("min_p", "min_p"), ("repeat_penalty", "repeat_penalty"))),
    RuntimeProfile("vllm", "vLLM", takes_folder=True, container=True, reserves_gpu_share=True, tunable=True,
                   settings_field="vllm", context_setting="max_model_len", executable="vllm serve",
                   sampling=_SAMPLING + (("top_k", "top_k"), ("min_p", "min_p"),
                                         ("repeat_penalty", "repetition_penalty"))),
    RuntimeProfile("mlx", "MLX", takes_folder=True, unified_memory=True, settings_field="mlx",
                   executable="mlx_lm.server", sampling=_SAMPLING + (("top_k", "top_k"), ("min_p", "min_p"),
                                                                     ("repeat_penalty", "repetition_penalty"))),
    RuntimeProfile("external", "external endpoint", on_node=False),
)}
RUNTIME_LABELS: dict[str, str] = {p.id: p.label for p in PROFILES.values()}
DEFAULT_RUNTIME: RuntimeId = next(p.id for p in PROFILES.values() if p.default)
# The fields of a model definition (and a launch spec) that hold agent runtimes' settings, side by side.
SETTINGS_FIELDS: tuple[str, ...] = tuple(p.settings_field for p in PROFILES.values() if p.settings_field)


def profile(runtime: str) -> RuntimeProfile:
    """The profile of ``runtime``; KeyError for a name no profile has (contracts only carry known ids)."""
    return PROFILES[runtime]  # type: ignore[index]


def runtime_among(offered: Sequence[str]) -> str:
    """The runtime a new model takes where ``offered`` are what its node offers it: the default one
    where offered, else the first offered; the default where nothing is (a node that has not said)."""
    return DEFAULT_RUNTIME if DEFAULT_RUNTIME in offered or not offered else offered[0]


class ExternalSettings(BaseModel):
    """An external endpoint's settings (``daemon.models.external``): where it is, the model name it knows,
    and the file holding its key. Today a view of the definition's own fields (``settings_of``)."""

    model_config = ConfigDict(extra="forbid")

    runtime: Literal["external"] = Field(default="external", exclude=True)  # the union's tag
    base_url: str | None = None
    provider_model: str | None = None
    api_key_file: str | None = None


# One runtime's settings; its ``runtime`` tag says which member it is.
RuntimeSettings = Annotated[LlamaCppSettings | VllmSettings | MlxSettings | ExternalSettings,
                            Field(discriminator="runtime")]
_EXTERNAL_FIELDS = tuple(name for name in ExternalSettings.model_fields if name != "runtime")
SettingsType = type[LlamaCppSettings] | type[VllmSettings] | type[MlxSettings] | type[ExternalSettings]
_SETTINGS_TYPES: dict[str, SettingsType] = {
    get_args(member.model_fields["runtime"].annotation)[0]: member
    for member in (LlamaCppSettings, VllmSettings, MlxSettings, ExternalSettings)}


def settings_type(runtime: str) -> SettingsType:
    """The member of ``RuntimeSettings`` that holds ``runtime``'s settings (its tag is ``runtime``)."""
    return _SETTINGS_TYPES[runtime]


def settings_of(holder: Any) -> RuntimeSettings:
    """The settings of ``holder``'s own runtime (a model definition or a launch spec): the field its
    profile names (``settings_field``), or for an external endpoint its endpoint fields. The one
    place that picks a runtime's settings out of the fields side by side."""
    field = profile(holder.runtime).settings_field
    if field is None:
        return ExternalSettings.model_validate({name: getattr(holder, name, None) for name in _EXTERNAL_FIELDS})
    settings: RuntimeSettings = getattr(holder, field)
    return settings


class HasRuntimeSettings:
    """What a model definition and a launch spec share: ``runtime_settings``, the settings of their
    own runtime (``settings_of``); read them there, not by field."""

    @property
    def runtime_settings(self) -> RuntimeSettings:
        """The settings of its own runtime (``settings_of``): read them here, not by field."""
        return settings_of(self)


def settings_update(settings: RuntimeSettings) -> dict[str, Any]:
    """The ``model_copy(update=...)`` that puts ``settings`` where a definition keeps its runtime's."""
    field = profile(settings.runtime).settings_field
    return settings.model_dump() if field is None else {field: settings}


class RuntimeOffer(BaseModel):
    """One driver on one node, honestly reported."""

    runtime: RuntimeId
    available: bool
    version: str | None = Field(default=None, description="llama-server's build, the vLLM version, the mlx-lm version.")
    digest: str | None = Field(default=None, description="The build's SHA-256 fingerprint, or the image digest.")
    location: str | None = Field(default=None, description="The executable's path, or the image reference.")
    reason: str | None = Field(default=None, description="Why it is unavailable; on an available one, what is "
                                                         "not known about it (e.g. an image whose vLLM version is unknown).")
    backends: list[BackendState] = Field(default_factory=list, description="llama.cpp: the backends its build "
                                         "carries (CPU, Vulkan, CUDA, Metal), each with its devices and verdict.")
