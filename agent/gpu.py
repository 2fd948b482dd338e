"""GPU probes: what the GPUs hold and do right now. No GPU, or no NVIDIA driver, is normal.

``GpuProbe`` is the seam: telemetry and status call ``sample()`` (blocking; they run it in an
executor), and tests hand in a fake. ``NvmlProbe`` reads NVIDIA GPUs through pynvml, with the
processes on each GPU (compute and graphics lists) so telemetry can tell each runtime's own share.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from agent.api.models import GpuInfo, GpuProcess

_LOGGER = logging.getLogger(__name__)

_NVML_ERROR_NOT_FOUND = 6  # nvmlDeviceGetProcessUtilization: no sample since the time asked


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
        self._seen_us: dict[int, int] = {}  # per GPU index: the newest utilisation sample read

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

    def _one(self, nvml: Any, index: int) -> GpuInfo:
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
        info.processes = self._processes(nvml, index, handle, info.utilization_percent)
        return info

    def _processes(self, nvml: Any, index: int, handle: Any, device_util: float | None) -> list[GpuProcess]:
        memory: dict[int, int | None] = {}
        for lister in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                listed = getattr(nvml, lister)(handle)
            except Exception as exc:  # noqa: BLE001 - not supported here: that list is unknown
                _LOGGER.debug("NVML %s failed on GPU %d: %s", lister, index, exc)
                continue
            for proc in listed:
                used = getattr(proc, "usedGpuMemory", None)  # None: the driver cannot say (WDDM)
                pid = int(proc.pid)
                if used is not None:
                    memory[pid] = (memory.get(pid) or 0) + int(used)
                else:
                    memory.setdefault(pid, None)
        per_process = self._process_utilization(nvml, index, handle)

        def utilization(pid: int) -> float | None:
            if per_process is not None:
                return per_process.get(pid, 0.0)  # no sample since the last read: it did nothing
            if len(memory) == 1:
                return device_util  # the only process on the GPU: the GPU's load is its own
            return None

        return [GpuProcess(pid=pid, memory_used=used, utilization_percent=utilization(pid))
                for pid, used in sorted(memory.items())]

    def _process_utilization(self, nvml: Any, index: int, handle: Any) -> dict[int, float] | None:
        """SM use per PID from the newest samples; ``{}`` when none came since the last read (idle),
        None when the GPU or driver cannot tell."""
        reader = getattr(nvml, "nvmlDeviceGetProcessUtilization", None)
        if reader is None:
            return None
        try:
            samples = reader(handle, self._seen_us.get(index, 0))
        except Exception as exc:  # noqa: BLE001 - NotSupported on many GPUs; NotFound means idle
            return {} if getattr(exc, "value", None) == _NVML_ERROR_NOT_FOUND else None
        newest: dict[int, tuple[int, float]] = {}
        for s in samples:
            stamp = int(s.timeStamp)
            if int(s.pid) not in newest or stamp >= newest[int(s.pid)][0]:
                newest[int(s.pid)] = (stamp, float(s.smUtil))
            self._seen_us[index] = max(self._seen_us.get(index, 0), stamp)
        return {pid: util for pid, (_stamp, util) in newest.items()}
