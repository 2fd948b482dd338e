"""Which llama.cpp backend a node computes on: the contract the agent, the daemon, ``ctl`` and the app share.

A portable build (``installers/llamacpp_runtime.py``) carries the CPU code and, as modules, GPU
backends: ``vulkan`` (any vendor), ``cuda`` (NVIDIA); ``metal`` is built into Apple Silicon builds.
Each agent reports a ``BackendState`` per backend its build has (``RuntimeOffer.backends``): the
devices that backend sees, with their memory, and whether it has computed on this node. The
operator sets a per-node ``BackendChoice`` (``auto`` or one backend); ``pick_backend`` is the one
place that turns the choice and the states into the backend a model starts on, and says why not a
better one. The daemon keeps the choice and sends it with every launch (``LaunchSpec.backend``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field


class Backend(StrEnum):
    """A llama.cpp backend, and the prefix of its devices' names (``Vulkan0``, ``CUDA0``, ``MTL0``)."""

    CPU = "cpu"
    VULKAN = "vulkan"
    CUDA = "cuda"
    METAL = "metal"

    @property
    def label(self) -> str:
        return {"cpu": "CPU", "vulkan": "Vulkan", "cuda": "CUDA", "metal": "Metal"}[self.value]

    @property
    def is_gpu(self) -> bool:
        return self is not Backend.CPU

    @property
    def device_prefix(self) -> str | None:
        """How llama.cpp names this backend's devices (``Vulkan0``); None: the CPU has none to name."""
        return {"cpu": None, "vulkan": "Vulkan", "cuda": "CUDA", "metal": "MTL"}[self.value]


BackendChoice = Literal["auto", "cuda", "vulkan", "cpu"]
CHOICES: tuple[str, ...] = ("auto", "cuda", "vulkan", "cpu")
# ``auto``: the best backend that works, in this order (Metal only exists on Apple Silicon builds).
AUTO_ORDER: tuple[Backend, ...] = (Backend.CUDA, Backend.METAL, Backend.VULKAN, Backend.CPU)
# llama.cpp's device-name prefixes -> backend (``--list-devices``, ``--device``, buffer names).
DEVICE_PREFIXES: tuple[tuple[str, Backend], ...] = (("Vulkan", Backend.VULKAN), ("CUDA", Backend.CUDA),
                                                    ("MTL", Backend.METAL), ("Metal", Backend.METAL))


class Device(BaseModel):
    """One device as the build itself lists it (``llama-server --list-devices``)."""

    name: str = Field(description="llama.cpp's device name: Vulkan0, CUDA0, MTL0.")
    description: str = Field(default="", description="What the driver calls it: llvmpipe (LLVM 15.0.6, 256 bits).")
    memory_total_mib: int = 0
    memory_free_mib: int = 0


class BackendState(BaseModel):
    """One backend of this node's build, as far as this node knows it."""

    backend: Backend
    available: bool = Field(description="It loads, sees a device and has not failed here.")
    verified: bool = Field(default=False, description="It has computed here: a generation with layers on its device.")
    devices: list[Device] = Field(default_factory=list)
    reason: str | None = Field(default=None, description="Why it is unavailable, or what is not yet known.")
    driver: str | None = Field(default=None, description="The driver's version where known (NVML on NVIDIA).")


class BackendSetting(BaseModel):
    """Body of ``PUT /api/nodes/{id}/backend`` and what it answers."""

    backend: BackendChoice = Field(description="auto (the best that works), or one backend: cuda, vulkan, cpu.")


@dataclass(frozen=True)
class Pick:
    """The backend a start will use, and in words why not a better one (None: nothing better failed)."""

    backend: Backend
    why: str | None = None


def pick_backend(choice: str, states: list[BackendState]) -> Pick:
    """``choice`` against the node's backends: the one a model starts on.

    ``auto`` takes the first available backend of ``AUTO_ORDER``; a named one is used while it is
    available, else the node falls back the same way and says why. The CPU is always there.
    """
    by_name = {s.backend: s for s in states}
    skipped: list[str] = []
    order = list(AUTO_ORDER)
    if choice != "auto":
        wanted = Backend(choice)
        order.remove(wanted)
        order.insert(0, wanted)
    for backend in order:
        if backend is Backend.CPU:
            return Pick(Backend.CPU, "; ".join(skipped) or None)
        state = by_name.get(backend)
        if state is None:
            if choice == backend.value:
                skipped.append(f"{backend.label}: this node's llama.cpp build has no {backend.label} backend")
            continue
        if state.available:
            return Pick(backend, "; ".join(skipped) or None)
        skipped.append(f"{backend.label}: {state.reason or 'unavailable'}")
    return Pick(Backend.CPU, "; ".join(skipped) or None)  # pragma: no cover - CPU ends the order


def backend_of_device(name: str) -> Backend | None:
    for prefix, backend in DEVICE_PREFIXES:
        if name.startswith(prefix):
            return backend
    return None


_DEVICE_LINE = re.compile(r"^\s+(?P<name>[A-Za-z]+\d+):\s*(?P<description>.*?)\s*"
                          r"\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$")


def parse_list_devices(output: str) -> list[Device]:
    """The devices in ``llama-server --list-devices``' output (``  Vulkan0: llvmpipe (...) (N MiB, M MiB free)``)."""
    devices: list[Device] = []
    for line in output.splitlines():
        match = _DEVICE_LINE.match(line)
        if match:
            devices.append(Device(name=match["name"], description=match["description"],
                                  memory_total_mib=int(match["total"]), memory_free_mib=int(match["free"])))
    return devices


class Offload(BaseModel):
    """Where a running llama-server put a model, from its own log: ``offloaded 19/19 layers to GPU``
    and the buffer sizes per device (``Vulkan0 model buffer size = 241.41 MiB``)."""

    layers_on_gpu: int | None = None
    layers_total: int | None = None
    model_mib: dict[str, float] = Field(default_factory=dict, description="Weights per buffer: Vulkan0, CPU_Mapped.")
    kv_mib: dict[str, float] = Field(default_factory=dict, description="KV cache per buffer.")

    @property
    def devices(self) -> list[str]:
        """The GPU devices that hold weights (``Vulkan0``), in the order the log named them."""
        return [name for name in self.model_mib if backend_of_device(name) is not None]


_OFFLOADED = re.compile(r"offloaded (?P<n>\d+)/(?P<m>\d+) layers to GPU")
_MODEL_BUFFER = re.compile(r"(?P<buffer>\S+) model buffer size\s*=\s*(?P<mib>[\d.]+) MiB")
_KV_BUFFER = re.compile(r"(?P<buffer>\S+) KV buffer size\s*=\s*(?P<mib>[\d.]+) MiB")


def parse_offload(lines: list[str]) -> Offload:
    """What llama-server's load log says about placement (the last load in ``lines`` wins).

    llama.cpp says "offloaded 19/19 layers to GPU" even where no GPU backend is loaded (the layers
    then stay with the CPU): only a model buffer on a GPU device (``Vulkan0``, ``CUDA0``) makes them
    count as on the GPU."""
    offload = Offload()
    for line in lines:
        if (found := _OFFLOADED.search(line)) is not None:
            offload = Offload(layers_on_gpu=int(found["n"]), layers_total=int(found["m"]))
        elif (found := _MODEL_BUFFER.search(line)) is not None:
            offload.model_mib[found["buffer"]] = offload.model_mib.get(found["buffer"], 0.0) + float(found["mib"])
        elif (found := _KV_BUFFER.search(line)) is not None:
            offload.kv_mib[found["buffer"]] = offload.kv_mib.get(found["buffer"], 0.0) + float(found["mib"])
    if offload.layers_total is not None and not offload.devices:
        offload.layers_on_gpu = 0
    return offload
