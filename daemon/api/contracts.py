"""The agent's contracts that travel inside the daemon's API, re-exported so the app sees only
``daemon.api``.

A ``ModelDefinition`` carries ``LlamaCppSettings`` (its fields hold the flag, default and unit the
settings editor is built from), a node and a host snapshot carry ``GpuInfo``, fits and transfers
carry the source shapes, and pairing shows and reads codes and fingerprints the agent's way.
"""

from __future__ import annotations

from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import GpuInfo
from agent.api.pairing import format_code, normalize_code, short_fingerprint
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

__all__ = ["FitReport", "GgufSummary", "GpuInfo", "HfFileRef", "ImportedModel", "LlamaCppSettings",
           "LmStudioModelInfo", "MemoryEstimate", "OllamaModelInfo", "TransferState", "format_code", "normalize_code",
           "short_fingerprint"]
