"""What Ollama's model lists say of a model: size, family, parameters, quantization, context.

The daemon keeps no copy of a model file's header: the node that holds the file reads it (the
agent's ``fit``, which every start already uses) and the answer is kept here a few minutes. A model
whose node is offline, or that is no GGUF file (vLLM, MLX, an external endpoint), is listed with
what the registry alone says; Ollama's clients read an empty field as unknown.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.api.backends import backend_of_device
from agent.api.client import AgentError
from agent.api.runtimes import profile
from agent.api.sources import FitRequest, GgufSummary
from daemon.api.models import ModelDefinition, ModelStatus
from daemon.models.orchestrator import Orchestrator
from daemon.nodes.links import Links

_LOGGER = logging.getLogger(__name__)

KEPT_S = 300.0  # a header read is kept this long: a file replaced in place shows within minutes
READ_TIMEOUT_S = 5.0  # a node slow to answer leaves the fields empty rather than the list waiting
NEVER = "2318-01-01T00:00:00Z"  # Ollama's expires_at for a model kept loaded until told otherwise
MIB = 1024 * 1024
# llama.cpp's LLAMA_FTYPE values (the header's general.file_type) by name.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
              26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
              36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE"}


def parameter_size(count: int | None) -> str:
    """Ollama's way of writing a parameter count: ``268.10M``, ``3.2B``, ``8B``."""
    if not count:
        return ""
    for scale, unit, decimals in ((1e9, "B", 1), (1e6, "M", 2)):
        if count >= scale:
            number = count / scale
            return f"{number:.0f}{unit}" if number == int(number) else f"{number:.{decimals}f}{unit}"
    return f"{count / 1e3:.0f}K" if count >= 1000 else str(count)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class ModelFacts:
    def __init__(self, links: Links, orchestrator: Orchestrator, registry_file: Path) -> None:
        self._links = links
        self._orchestrator = orchestrator
        self._registry_file = registry_file  # its time is a definition's last change
        self._kept: dict[tuple[str, str], tuple[float, GgufSummary | None]] = {}

    async def summaries(self, definitions: list[ModelDefinition]) -> list[GgufSummary | None]:
        return list(await asyncio.gather(*(self.summary(d) for d in definitions)))

    async def summary(self, definition: ModelDefinition) -> GgufSummary | None:
        """The header facts of the model's file, read by its node (None: not a GGUF, node offline)."""
        if not profile(definition.runtime).reads_gguf:
            return None
        node = self._orchestrator.placed(definition).node
        key = (node, definition.model_path)
        kept = self._kept.get(key)
        if kept is not None and time.monotonic() - kept[0] < KEPT_S:
            return kept[1]
        link = self._links.get(node)
        if link is None or not link.online:
            return None
        try:
            report = await asyncio.wait_for(link.client.fit(FitRequest(model_path=definition.model_path)),
                                            READ_TIMEOUT_S)
        except (AgentError, TimeoutError, OSError) as exc:
            _LOGGER.info("no header facts of %s on %s for the Ollama API: %s", definition.model_path, node, exc)
            return None
        self._kept[key] = (time.monotonic(), report.summary)
        return report.summary

    def modified_at(self) -> str:
        try:
            return _iso(self._registry_file.stat().st_mtime)
        except OSError:
            return _iso(time.time())

    @staticmethod
    def details(definition: ModelDefinition, summary: GgufSummary | None) -> dict[str, Any]:
        family = summary.architecture if summary is not None else ""
        quant = FILE_TYPES.get(summary.file_type, "") if summary is not None and summary.file_type is not None else ""
        return {"parent_model": "", "format": "gguf" if profile(definition.runtime).reads_gguf else "",
                "family": family, "families": [family] if family else None,
                "parameter_size": parameter_size(summary.parameter_count if summary is not None else None),
                "quantization_level": quant}

    def entry(self, name: str, definition: ModelDefinition, summary: GgufSummary | None) -> dict[str, Any]:
        """The model as ``/api/tags`` lists it."""
        digest = hashlib.sha256(f"{definition.id}\0{definition.node}\0{definition.model_path}".encode()).hexdigest()
        return {"name": name, "model": name, "modified_at": self.modified_at(),
                "size": summary.file_size if summary is not None else 0, "digest": digest,
                "details": self.details(definition, summary)}

    def loaded(self, name: str, definition: ModelDefinition, status: ModelStatus,
               summary: GgufSummary | None) -> dict[str, Any]:
        """The model as ``/api/ps`` lists it: its memory from the runtime's own log where known."""
        entry = self.entry(name, definition, summary)
        del entry["modified_at"]
        offload = status.offload
        if offload is not None and (offload.model_mib or offload.kv_mib):
            buffers = [*offload.model_mib.items(), *offload.kv_mib.items()]  # weights and KV cache, per device
            entry["size"] = int(sum(mib for _, mib in buffers) * MIB)
            entry["size_vram"] = int(sum(mib for d, mib in buffers if backend_of_device(d) is not None) * MIB)
        else:
            entry["size_vram"] = 0
        idle = definition.idle_unload_seconds
        if idle:
            last = self._orchestrator.last_used(definition.id, time.monotonic())
            entry["expires_at"] = _iso(time.time() + max(0.0, last + idle - time.monotonic()))
        else:
            entry["expires_at"] = NEVER
        context = definition.settings.ctx_size or (summary.context_length if summary is not None else None)
        if context:
            entry["context_length"] = context
        return entry

    @staticmethod
    def model_info(summary: GgufSummary | None) -> dict[str, Any]:
        """``/api/show``'s ``model_info``: the header keys Ollama's clients read (context length above all)."""
        if summary is None:
            return {}
        arch = summary.architecture
        info: dict[str, Any] = {"general.architecture": arch, "general.name": summary.name,
                                "general.parameter_count": summary.parameter_count,
                                f"{arch}.context_length": summary.context_length,
                                f"{arch}.embedding_length": summary.embedding_length,
                                f"{arch}.block_count": summary.block_count,
                                f"{arch}.attention.head_count": summary.head_count}
        return {key: value for key, value in info.items() if value not in (None, "")}
