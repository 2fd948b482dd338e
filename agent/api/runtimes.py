"""The runtimes an agent can drive, and what a node says about each: the contracts both sides share.

``RuntimeId`` names a driver: ``llamacpp`` (llama.cpp's ``llama-server``, a native process),
``vllm`` (vLLM's OpenAI server in a Docker container, Linux nodes with a Docker engine) and ``mlx``
(``mlx_lm.server``, a native process on Apple Silicon). ``external`` is no driver: an
OpenAI-compatible server somewhere else that the daemon's router calls itself (``daemon.router.external``);
no agent runs it, offers it or accepts a launch spec for it. Every agent reports each driver it has as a
``RuntimeOffer`` (``AgentStatus.runtime_offers``, ``/api/nodes``' ``runtimes``): available or not,
the version it really is, where it is, and why it is unavailable when it is.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.api.backends import BackendState

RuntimeId = Literal["llamacpp", "vllm", "mlx", "external"]
# The runtimes an agent drives (a node offers each or says why not); ``external`` is none of them.
RUNTIMES: tuple[RuntimeId, ...] = ("llamacpp", "vllm", "mlx")
EXTERNAL: RuntimeId = "external"
LLAMACPP: RuntimeId = "llamacpp"  # its builds carry the GPU backends (agent.api.backends)
RUNTIME_LABELS: dict[str, str] = {"llamacpp": "llama.cpp", "vllm": "vLLM", "mlx": "MLX",
                                  "external": "external endpoint"}


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
