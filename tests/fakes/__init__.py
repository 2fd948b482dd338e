"""Hand-written fakes shared by the tests: a fake llama-server, a fake GPU probe."""

from __future__ import annotations

import logging
import shlex
import stat
import sys
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

FAKE_LLAMA_SERVER = Path(__file__).with_name("fake_llama_server.py")

SWITCHES = {"load_seconds", "load_quiet", "exit_code", "crash_after_s", "crash_exit_code", "stall",
            "ignore_sigterm", "token_delay_s", "tokens", "keepalive_s", "drop_reused",
            "fast_when", "fast_factor", "fast_once", "fail_when"}


def write_fake_runtime(directory: Path, name: str = "llama-server", **switches: object) -> Path:
    """Write an executable that runs the fake llama-server with ``switches`` baked in.

    ``write_fake_runtime(tmp, load_seconds=2, tokens=50)`` exports FAKE_LOAD_SECONDS=2 and
    FAKE_TOKENS=50. The agent passes a runtime only allowlisted variables, hence the wrapper.
    """
    unknown = set(switches) - SWITCHES
    if unknown:
        raise TypeError(f"unknown fake runtime switches: {sorted(unknown)}; known: {sorted(SWITCHES)}")
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["#!/bin/sh"]
    for key, value in sorted(switches.items()):
        if value is None or value is False:
            continue
        text = "1" if value is True else str(value)
        lines.append(f"export FAKE_{key.upper()}={shlex.quote(text)}")
    lines.append(f'exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_LLAMA_SERVER))} "$@"')
    path = directory / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class FakeGpuProbe:
    """A GPU probe that reports what the test gives it."""

    def __init__(self, gpus: list[object] | None = None) -> None:
        self.gpus = list(gpus or [])
        self.calls = 0

    def sample(self) -> list:  # list[GpuInfo]
        self.calls += 1
        return list(self.gpus)



class FakeNvml:
    """The few pynvml functions ``NvmlProbe`` calls, for one GPU (or a failing driver)."""

    class _Memory:
        total = 24 << 30
        used = 3 << 30

    class _Rates:
        gpu = 37

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return self._Memory()

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"Fake GPU 24GB"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return "GPU-fake-0"

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        return self._Rates()

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 51

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        raise RuntimeError("Not Supported")  # not every GPU reports power
