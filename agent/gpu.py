"""GPU probes: what the GPUs hold and do right now. No GPU, or no NVIDIA driver, is normal.

``GpuProbe`` is the seam: telemetry and status call ``sample()`` (blocking; they run it in an
executor), and tests hand in a fake. ``NvmlProbe`` reads NVIDIA GPUs through pynvml, with the
processes on each GPU (compute and graphics lists) so telemetry can tell each runtime's own share,
their ECC error counts, why their clocks are held down (throttle reasons, decoded to names), and
the XID errors the driver reports (``XidWatcher``: an NVML event set waited on in a thread). What
a GPU does not report (NVML's "not supported") is left absent (None), never 0.
``UnifiedMemoryProbe`` is Apple silicon's one GPU: the system's unified memory, with Metal's
recommended working set when it can be read.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import platform
import subprocess
import threading
from collections.abc import Callable
from typing import Any, Protocol

import psutil

from agent.api.models import GpuEcc, GpuInfo, GpuProcess

_LOGGER = logging.getLogger(__name__)

_NVML_ERROR_NOT_FOUND = 6  # nvmlDeviceGetProcessUtilization: no sample since the time asked
_NVML_ERROR_TIMEOUT = 10  # nvmlEventSetWait: no event within the time asked
_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
_XID_WAIT_MS = 500
# (counter type, error type) per GpuEcc field: NVML_VOLATILE_ECC 0 / NVML_AGGREGATE_ECC 1,
# NVML_MEMORY_ERROR_TYPE_CORRECTED 0 / UNCORRECTED 1
_ECC_COUNTERS = {"volatile_corrected": (0, 0), "volatile_uncorrected": (0, 1),
                 "aggregate_corrected": (1, 0), "aggregate_uncorrected": (1, 1)}
# nvmlClocksEventReason* bits (nvmlClocksThrottleReason* in older drivers) and their names
THROTTLE_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                    0x100: "display_clock_setting", 0x200: "board_limit", 0x400: "reliability"}


def throttle_names(mask: int) -> list[str]:
    """The reasons set in a clocks event (throttle) reason mask; an unknown bit by its value."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


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
        self._driver: str | None = None
        self.xids: XidWatcher | None = None

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
            return None
        self.xids = XidWatcher.start(module)
        return self._nvml

    def close(self) -> None:
        """Stop watching for XID errors (the thread ends within its wait's timeout)."""
        if self.xids is not None:
            self.xids.stop()

    def driver_version(self) -> str | None:
        """The NVIDIA driver's version (``580.95.05``), or None where there is no NVML."""
        if self._driver is None:
            nvml = self._init()
            if nvml is None:
                return None
            with contextlib.suppress(Exception):
                raw = nvml.nvmlSystemGetDriverVersion()
                self._driver = raw.decode() if isinstance(raw, bytes) else str(raw)
        return self._driver

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
        with contextlib.suppress(Exception):
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            info.compute_capability = f"{major}.{minor}"
        info.driver_version = self.driver_version()
        info.processes = self._processes(nvml, index, handle, info.utilization_percent)
        info.ecc = _ecc(nvml, handle)
        info.throttle_reasons = _throttle_reasons(nvml, handle)
        if self.xids is not None and index in self.xids.watched:
            info.xid_events, info.last_xid = self.xids.counts.get(index, 0), self.xids.last.get(index)
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


def _ecc(nvml: Any, handle: Any) -> GpuEcc | None:
    """The GPU's ECC counts; None when it reports none (ECC off, or not an ECC GPU)."""
    ecc = GpuEcc()
    for field, (counter, error) in _ECC_COUNTERS.items():
        with contextlib.suppress(Exception):  # NVMLError_NotSupported: that count is absent
            setattr(ecc, field, int(nvml.nvmlDeviceGetTotalEccErrors(handle, error, counter)))
    return ecc if any(v is not None for v in ecc.model_dump().values()) else None


def _throttle_reasons(nvml: Any, handle: Any) -> list[str] | None:
    for reader in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        read = getattr(nvml, reader, None)
        if read is None:
            continue
        try:
            return throttle_names(int(read(handle)))
        except Exception as exc:  # noqa: BLE001 - not supported on this GPU (or not by this driver's name)
            _LOGGER.debug("NVML %s failed: %s", reader, exc)
    return None


class XidWatcher:
    """Counts the XID errors NVML reports, per GPU index, with the newest code.

    One thread waits on an NVML event set (``nvmlEventSetWait``, a short timeout so ``stop()`` is
    quick); a GPU whose driver refuses to register XID events is not in ``watched`` (its count is
    absent, not 0)."""

    def __init__(self, nvml: Any, event_set: Any, watched: set[int]) -> None:
        self._nvml = nvml
        self._set = event_set
        self.watched = watched
        self.counts: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.seen = threading.Event()  # set after each event counted (tests wait on it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)

    @classmethod
    def start(cls, nvml: Any) -> XidWatcher | None:
        try:
            event_set = nvml.nvmlEventSetCreate()
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:  # noqa: BLE001 - no event support: XID counts stay absent
            _LOGGER.debug("NVML events unavailable, XID errors not watched: %s", exc)
            return None
        watched: set[int] = set()
        for index in range(count):
            try:
                nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(index), _XID_CRITICAL_ERROR, event_set)
                watched.add(index)
            except Exception as exc:  # noqa: BLE001 - NotSupported on this GPU
                _LOGGER.debug("XID events not supported on GPU %d: %s", index, exc)
        if not watched:
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(event_set)
            return None
        watcher = cls(nvml, event_set, watched)
        watcher._thread.start()
        return watcher

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        nvml = self._nvml
        try:
            while not self._stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait(self._set, _XID_WAIT_MS)
                except Exception as exc:  # noqa: BLE001 - a timeout is the quiet case
                    if getattr(exc, "value", None) == _NVML_ERROR_TIMEOUT:
                        continue
                    _LOGGER.warning("NVML event wait failed, XID errors no longer counted: %s", exc)
                    self.watched = set()
                    return
                if int(data.eventType) & _XID_CRITICAL_ERROR:
                    self._count(nvml, data)
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(self._set)

    def _count(self, nvml: Any, data: Any) -> None:
        try:
            index = int(nvml.nvmlDeviceGetIndex(data.device))
        except Exception:  # noqa: BLE001 - the device went away
            return
        self.counts[index] = self.counts.get(index, 0) + 1
        self.last[index] = int(data.eventData)
        _LOGGER.warning("GPU %d reported XID %d", index, int(data.eventData))
        self.seen.set()


# Vulkan devices whose memory is the system's (Mesa's CPU rasteriser lavapipe): counted as unified.
CPU_TYPE_DEVICE_NAMES = ("llvmpipe", "lavapipe", "SwiftShader")


class RuntimeListedProbe:
    """NVIDIA's GPUs from NVML; elsewhere the GPUs the node's llama.cpp build itself lists (its Vulkan
    devices on AMD and Intel, with the memory ``--list-devices`` reported), so admission, will-it-fit
    and the plan count device memory where a model's layers really go, under the build's own device
    names. A CPU-type device (lavapipe) is marked unified: its memory is the system's."""

    def __init__(self, nvml: GpuProbe, listed: Callable[[], list[tuple[str, str, int, int]]]) -> None:
        """``listed``: () -> [(name, description, total MiB, free MiB)] of the build's GPU devices."""
        self._nvml = nvml
        self._listed = listed

    def __getattr__(self, name: str) -> Any:  # driver_version, close, xids: NVML's
        return getattr(self._nvml, name)

    def sample(self) -> list[GpuInfo]:
        found = self._nvml.sample()
        if found:
            return found
        gpus = []
        for index, (_name, description, total_mib, free_mib) in enumerate(self._listed()):
            gpus.append(GpuInfo(index=index, name=description, memory_total=total_mib << 20,
                                memory_used=max(0, total_mib - free_mib) << 20,
                                unified_memory=any(marker in description for marker in CPU_TYPE_DEVICE_NAMES)))
        return gpus


class UnifiedMemoryProbe:
    """Apple silicon's GPU: one entry whose memory is the system's unified memory, marked unified,
    with Metal's recommended working-set size when it can be read (pyobjc's Metal, else the
    ``iogpu.wired_limit_mb`` sysctl when set)."""

    def __init__(self, memory: Callable[[], tuple[int, int]] | None = None,
                 working_set: Callable[[], int | None] | None = None, name: str | None = None) -> None:
        """``memory``: () -> (total, available) bytes; ``working_set``: () -> bytes or None (tests)."""
        self._memory = memory or _system_memory
        self._working_set = working_set or _metal_working_set
        self._name = name
        self._limit: int | None = None
        self._limit_read = False

    def sample(self) -> list[GpuInfo]:
        total, available = self._memory()
        if not self._limit_read:  # fixed while the system runs: read once
            self._limit_read = True
            with contextlib.suppress(Exception):
                self._limit = self._working_set()
        return [GpuInfo(index=0, name=self._name or _chip_name(), memory_total=total,
                        memory_used=max(0, total - available), unified_memory=True,
                        working_set_limit=self._limit)]


def apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() in ("arm64", "aarch64")


def _system_memory() -> tuple[int, int]:
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def _chip_name() -> str:
    with contextlib.suppress(Exception):
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                             timeout=2, check=False).stdout.strip()
        if out:
            return out
    return "Apple GPU"


def _metal_working_set() -> int | None:
    with contextlib.suppress(Exception):
        metal = importlib.import_module("Metal")  # pyobjc-framework-Metal, when installed
        device = metal.MTLCreateSystemDefaultDevice()
        if device is not None:
            return int(device.recommendedMaxWorkingSetSize())
    with contextlib.suppress(Exception):
        out = subprocess.run(["sysctl", "-n", "iogpu.wired_limit_mb"], capture_output=True, text=True,
                             timeout=2, check=False).stdout.strip()
        if out.isdigit() and int(out) > 0:  # 0: the system's default, which only Metal tells
            return int(out) << 20
    return None
