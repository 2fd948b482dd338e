"""GPU probes: what the GPUs hold and do right now. No GPU, or no NVIDIA driver, is normal.

``GpuProbe`` is the seam: telemetry and status call ``sample()`` (blocking; they run it in an
executor), and tests hand in a fake. ``NvmlProbe`` reads NVIDIA GPUs through pynvml.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from agent.api.models import GpuInfo

_LOGGER = logging.getLogger(__name__)


class GpuProbe(Protocol):
    def sample(self) -> list[GpuInfo]:
        """The GPUs now; an empty list when there are none or they cannot be read. Blocking."""
        ...


class NoGpuProbe:
    def sample(self) -> list[GpuInfo]:
        return []


class NvmlProbe:
    """NVIDIA GPUs via NVML; initialised once, on first use."""

    def __init__(self, nvml: Any = None) -> None:
        """``nvml``: the pynvml module or a stand-in with its functions (tests); default pynvml."""
        self._lock = threading.Lock()
        self._module = nvml
        self._nvml: Any = None
        self._unavailable = False
        self._warned = False

    def _init(self) -> Any:
        if self._nvml is not None or self._unavailable:
            return self._nvml
        try:
            module = self._module if self._module is not None else importlib.import_module("pynvml")
            module.nvmlInit()
            self._nvml = module
        except Exception as exc:  # noqa: BLE001 - any NVML failure means "no NVIDIA GPUs here"
            self._unavailable = True
            _LOGGER.debug("NVML unavailable, reporting no GPUs: %s", exc)
        return self._nvml

    def sample(self) -> list[GpuInfo]:
        with self._lock:
            nvml = self._init()
            if nvml is None:
                return []
            try:
                return [self._one(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
            except Exception as exc:  # noqa: BLE001 - a driver hiccup must not stop telemetry
                if not self._warned:
                    _LOGGER.debug("NVML query failed: %s", exc)
                    self._warned = True
                return []

    @staticmethod
    def _one(nvml: Any, index: int) -> GpuInfo:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        name = nvml.nvmlDeviceGetName(handle)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        info = GpuInfo(index=index, name=name.decode() if isinstance(name, bytes) else str(name),
                       uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                       memory_total=int(memory.total), memory_used=int(memory.used))
        readers: list[tuple[str, Callable[[], float]]] = [
            ("utilization_percent", lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            ("temperature_c", lambda: float(nvml.nvmlDeviceGetTemperature(handle, 0))),
            ("power_w", lambda: float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0),
        ]
        for field, read in readers:
            with contextlib.suppress(Exception):  # not every GPU reports every figure
                setattr(info, field, float(read()))
        return info
