"""The agent's contracts that travel inside the daemon's API, re-exported so the app sees only
``daemon.api``.

A ``ModelDefinition`` carries one settings model per runtime (``LlamaCppSettings``, ``VllmSettings``,
``MlxSettings``: their fields hold the flag, default and unit the settings editor is built from; each a member
of ``RuntimeSettings``, ``settings_type(runtime)`` its class, ``definition.runtime_settings`` its own) and
names its runtime (``RuntimeId``, shown with ``RUNTIME_LABELS``), a node and a host snapshot carry
``GpuInfo``, fits and transfers carry the source shapes, and pairing shows and reads codes and
fingerprints the agent's way.
"""

from __future__ import annotations

from agent.api.backends import CHOICES as BACKEND_CHOICES
from agent.api.backends import Backend, BackendSetting, BackendState, Device, Offload
from agent.api.llamacpp import LlamaCppSettings
from agent.api.mlx import MlxSettings
from agent.api.models import GpuEcc, GpuInfo
from agent.api.pairing import format_code, normalize_code, short_fingerprint
from agent.api.runtimes import (
    DEFAULT_RUNTIME,
    PROFILES,
    RUNTIME_LABELS,
    RUNTIMES,
    ExternalSettings,
    RuntimeId,
    RuntimeProfile,
    RuntimeSettings,
    profile,
    runtime_among,
    settings_type,
    settings_update,
)
from agent.api.sources import (
    FitReport,
    GgufSummary,
    HfFileRef,
    ImportedModel,
    LmStudioModelInfo,
    MemoryEstimate,
    OllamaModelInfo,
    TransferState,
)
from agent.api.vllm import VllmSettings
from core.key_store import KeysAtRest

__all__ = [
    "BACKEND_CHOICES",
    "DEFAULT_RUNTIME",
    "PROFILES",
    "RUNTIMES",
    "RUNTIME_LABELS",
    "Backend",
    "BackendSetting",
    "BackendState",
    "Device",
    "ExternalSettings",
    "FitReport",
    "GgufSummary",
    "GpuEcc",
    "GpuInfo",
    "HfFileRef",
    "ImportedModel",
    "KeysAtRest",
    "LlamaCppSettings",
    "LmStudioModelInfo",
    "MemoryEstimate",
    "MlxSettings",
    "Offload",
    "OllamaModelInfo",
    "RuntimeId",
    "RuntimeProfile",
    "RuntimeSettings",
    "TransferState",
    "VllmSettings",
    "format_code",
    "normalize_code",
    "profile",
    "runtime_among",
    "settings_type",
    "settings_update",
    "short_fingerprint",
]
