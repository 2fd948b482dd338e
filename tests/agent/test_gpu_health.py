"""GPU health through the NVML seam: ECC counts, throttle reasons decoded to names, XID errors
from an NVML event set, and Apple silicon's unified memory. The fake speaks pynvml's API: its
function names, return shapes and NVMLError codes ("not supported" is 3, a wait's timeout 10)."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from agent.api.models import GpuEcc, GpuInfo
from agent.gpu import NvmlProbe, UnifiedMemoryProbe, throttle_names

NOT_SUPPORTED, TIMEOUT = 3, 10
XID_CRITICAL_ERROR = 0x8
SW_POWER_CAP, HW_THERMAL_SLOWDOWN = 0x4, 0x40


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class _Memory:
    total: int
    used: int


@dataclass
class _Rates:
    gpu: int
    memory: int = 0


@dataclass
class _EventData:
    device: object
    eventType: int
    eventData: int
    gpuInstanceId: int = 0
    computeInstanceId: int = 0


@dataclass
class _Handle:
    index: int


@dataclass
class FakeGpu:
    ecc: dict[tuple[int, int], int] | None = None  # (error type, counter type) -> count; None: no ECC
    throttle: int | None = None  # the reasons mask; None: not supported
    xid_supported: bool = True


@dataclass
class FakeNvml:
    """Two GPUs unless told; ``xid(index, code)`` delivers an XID event to the waiting thread."""

    gpus: list[FakeGpu] = field(default_factory=lambda: [FakeGpu(), FakeGpu()])
    legacy_throttle_only: bool = False
    _events: queue.Queue[_EventData] = field(default_factory=queue.Queue)
    registered: list[int] = field(default_factory=list)
    freed: threading.Event = field(default_factory=threading.Event)

    def xid(self, index: int, code: int) -> None:
        self._events.put(_EventData(_Handle(index), XID_CRITICAL_ERROR, code))

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return handle.index

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> _Memory:
        return _Memory(total=80 << 30, used=10 << 30)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return f"GPU-{handle.index}"

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> _Rates:
        return _Rates(gpu=50)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return 60

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return 350_000  # mW

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[object]:
        return []

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[object]:
        return []

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        counts = self.gpus[handle.index].ecc
        if counts is None or (error_type, counter_type) not in counts:
            raise NVMLError(NOT_SUPPORTED)
        return counts[(error_type, counter_type)]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        if self.legacy_throttle_only:
            raise NVMLError(NOT_SUPPORTED)  # a driver older than the event-reasons name
        return self._throttle(handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:
        return self._throttle(handle)

    def _throttle(self, handle: _Handle) -> int:
        mask = self.gpus[handle.index].throttle
        if mask is None:
            raise NVMLError(NOT_SUPPORTED)
        return mask

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: object) -> None:
        if not self.gpus[handle.index].xid_supported:
            raise NVMLError(NOT_SUPPORTED)
        assert event_types & XID_CRITICAL_ERROR
        self.registered.append(handle.index)

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> _EventData:
        try:
            return self._events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(TIMEOUT) from None

    def nvmlEventSetFree(self, event_set: object) -> None:
        self.freed.set()


def test_ecc_counts_are_read_and_unreported_ones_are_absent() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(ecc={(0, 0): 12, (1, 0): 0, (0, 1): 340, (1, 1): 2}),
                          FakeGpu(ecc={(1, 0): 0}), FakeGpu(ecc=None)])
    probe = NvmlProbe(nvml)
    try:
        gpus = probe.sample()
    finally:
        probe.close()
    assert gpus[0].ecc == GpuEcc(volatile_corrected=12, volatile_uncorrected=0, aggregate_corrected=340,
                                 aggregate_uncorrected=2)
    assert gpus[1].ecc == GpuEcc(volatile_uncorrected=0)  # the others absent, not 0
    assert gpus[2].ecc is None  # no ECC on this GPU at all


def test_throttle_reasons_are_decoded_to_names() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(throttle=SW_POWER_CAP | HW_THERMAL_SLOWDOWN), FakeGpu(throttle=0),
                          FakeGpu(throttle=None)])
    probe = NvmlProbe(nvml)
    try:
        gpus = probe.sample()
    finally:
        probe.close()
    assert gpus[0].throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
    assert gpus[1].throttle_reasons == []  # running at full clocks
    assert gpus[2].throttle_reasons is None  # not reported


def test_an_older_driver_is_read_through_the_throttle_reasons_name() -> None:
    probe = NvmlProbe(FakeNvml(gpus=[FakeGpu(throttle=0x1)], legacy_throttle_only=True))
    try:
        assert probe.sample()[0].throttle_reasons == ["gpu_idle"]
    finally:
        probe.close()


def test_an_unknown_throttle_bit_is_kept_by_its_value() -> None:
    assert throttle_names(0x4 | 0x8000) == ["sw_power_cap", "0x8000"]


def test_xid_events_are_counted_per_gpu_with_the_last_code() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(), FakeGpu(), FakeGpu(xid_supported=False)])
    probe = NvmlProbe(nvml)
    try:
        before = probe.sample()
        assert [g.xid_events for g in before] == [0, 0, None]  # watched and quiet; not watched: absent
        assert probe.xids is not None
        for code in (79, 48):
            probe.xids.seen.clear()
            nvml.xid(1, code)
            assert probe.xids.seen.wait(10)
        after = probe.sample()
    finally:
        probe.close()
    assert (after[0].xid_events, after[0].last_xid) == (0, None)
    assert (after[1].xid_events, after[1].last_xid) == (2, 48)
    assert after[2].xid_events is None
    assert nvml.freed.wait(10)  # the event set is freed once the watcher stops


def test_no_event_support_leaves_xid_counts_absent() -> None:
    nvml = FakeNvml(gpus=[FakeGpu(xid_supported=False)])
    probe = NvmlProbe(nvml)
    gpus = probe.sample()
    assert probe.xids is None
    assert gpus[0].xid_events is None and gpus[0].last_xid is None


def test_unified_memory_is_the_system_memory_with_the_metal_limit() -> None:
    probe = UnifiedMemoryProbe(memory=lambda: (64 << 30, 40 << 30), working_set=lambda: 48 << 30, name="Apple M3 Max")
    assert probe.sample() == [GpuInfo(index=0, name="Apple M3 Max", memory_total=64 << 30, memory_used=24 << 30,
                                      unified_memory=True, working_set_limit=48 << 30)]


def test_an_unreadable_working_set_limit_is_absent() -> None:
    def unreadable() -> int | None:
        raise OSError("no Metal here")

    gpu = UnifiedMemoryProbe(memory=lambda: (16 << 30, 8 << 30), working_set=unreadable, name="Apple M1").sample()[0]
    assert gpu.unified_memory and gpu.working_set_limit is None and gpu.memory_total == 16 << 30
