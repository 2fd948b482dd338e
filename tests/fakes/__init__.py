"""Hand-written fakes shared by the tests: a fake llama-server, a fake GPU probe."""

from __future__ import annotations

import logging
import shlex
import stat
import sys
from pathlib import Path, PurePath

_LOGGER = logging.getLogger(__name__)

FAKE_LLAMA_SERVER = Path(__file__).with_name("fake_llama_server.py")

SWITCHES = {"load_seconds", "load_quiet", "exit_code", "crash_after_s", "crash_exit_code", "stall",
            "ignore_sigterm", "token_delay_s", "tokens", "keepalive_s", "drop_reused",
            "fast_when", "fast_factor", "fast_once", "fail_when", "sigill", "bind_delay_s",
            "reset_first", "starts_file", "usage_when_asked", "break_after"}

SWITCHES |= {"legacy_metrics", "tool_args", "log_requests"}  # KV-cache shapes, tool calls, request lines
SWITCHES |= {"version"}  # what --version prints
SWITCHES |= {"log_bodies"}  # a line with each generation request's JSON body
SWITCHES |= {"headers_file"}  # a JSON line with each /v1 request's trace headers
SWITCHES |= {"silent_after", "prompt_delay_s", "slow_after", "slow_factor"}  # a wedged stream; a long prompt read before the first token
SWITCHES |= {"stall_after"}  # a runtime that passes the agent's first-sight check, then wedges
SWITCHES |= {"prompt_wedged"}  # a runtime that wedges while it reads the prompt (its /slots stand still)


def fake_runtime_script(switches: dict[str, object], platform: str = sys.platform,
                        python: str = sys.executable, fake: PurePath = FAKE_LLAMA_SERVER) -> str:
    """The wrapper's text: a ``.cmd`` batch file on Windows, a ``/bin/sh`` script elsewhere."""
    values = {f"FAKE_{key.upper()}": "1" if value is True else str(value)
              for key, value in sorted(switches.items()) if value is not None and value is not False}
    if platform == "win32":
        lines = ["@echo off"]
        for name, text in values.items():
            if any(c in text for c in '"\r\n'):
                raise ValueError(f"{name}={text!r}: a .cmd wrapper cannot hold quotes or newlines")
            lines.append(f'set "{name}={text.replace("%", "%%")}"')  # %% is a literal % in a batch file
        lines.append(f'"{python}" "{fake}" %*')
        lines.append("exit /b %ERRORLEVEL%")
        return "\r\n".join(lines) + "\r\n"
    lines = ["#!/bin/sh"]
    lines += [f"export {name}={shlex.quote(text)}" for name, text in values.items()]
    lines.append(f'exec {shlex.quote(python)} {shlex.quote(str(fake))} "$@"')
    return "\n".join(lines) + "\n"


def write_fake_runtime(directory: Path, name: str = "llama-server", *, platform: str = sys.platform,
                       **switches: object) -> Path:
    """Write an executable that runs the fake llama-server with ``switches`` baked in.

    ``write_fake_runtime(tmp, load_seconds=2, tokens=50)`` exports FAKE_LOAD_SECONDS=2 and
    FAKE_TOKENS=50. The agent passes a runtime only allowlisted variables, hence the wrapper
    (``name.cmd`` on Windows).
    """
    unknown = set(switches) - SWITCHES
    if unknown:
        raise TypeError(f"unknown fake runtime switches: {sorted(unknown)}; known: {sorted(SWITCHES)}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (f"{name}.cmd" if platform == "win32" else name)
    path.write_bytes(fake_runtime_script(switches, platform).encode())
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def write_fake_build(root: Path, backends: dict[str, dict[str, object]] | None = None, **switches: object) -> Path:
    """A portable build folder (``runtime.json``, ``bin/llama-server``) of the fake llama-server for
    this machine, with a fake GPU module per backend (``backends/<name>/libggml-<name>.so``: the
    JSON the fake reads through ``GGML_BACKEND_PATH``, see ``fake_llama_server``). Returns the folder."""
    import json
    import platform as _platform

    folder = root / "llamacpp-11434.0.0-fake"
    server = write_fake_runtime(folder / "bin", **switches)
    listed: dict[str, object] = {"cpu": {"variants": []}}
    for name, module in (backends or {}).items():
        path = folder / "backends" / name / f"libggml-{name}.so"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(module))
        listed[name] = {"module": f"backends/{name}/{path.name}"}
    (folder / "runtime.json").write_text(json.dumps({
        "format": 1, "runtime": "llamacpp", "version": "11434.0.0", "system": _platform.system(),
        "machine": _platform.machine(), "server": f"bin/{server.name}", "backends": listed}))
    return folder


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

    class Error(Exception):
        """pynvml's NVMLError: the failure code in ``value``."""

        def __init__(self, value: int) -> None:
            super().__init__(f"NVML error {value}")
            self.value = value

    class _Process:
        def __init__(self, pid: int, used: int | None) -> None:
            self.pid, self.usedGpuMemory = pid, used

    class _UtilSample:
        def __init__(self, pid: int, stamp: int, sm: int) -> None:
            self.pid, self.timeStamp, self.smUtil, self.memUtil = pid, stamp, sm, 0

    NOT_SUPPORTED, NOT_FOUND = 3, 6

    def __init__(self, fail_init: bool = False, compute: list[tuple[int, int | None]] | None = None,
                 graphics: list[tuple[int, int | None]] | None = None,
                 process_util: list[tuple[int, int, int]] | int | None = None) -> None:
        """``compute``/``graphics``: (pid, bytes) on the GPU; ``process_util``: (pid, time µs, SM %)
        samples, or an NVML error code (NOT_SUPPORTED, NOT_FOUND); None: not supported."""
        self.fail_init = fail_init
        self.compute = compute or []
        self.graphics = graphics or []
        self.process_util = process_util
        self.util_since: list[int] = []

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[object]:
        return [self._Process(pid, used) for pid, used in self.compute]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[object]:
        return [self._Process(pid, used) for pid, used in self.graphics]

    def nvmlDeviceGetProcessUtilization(self, handle: int, since_us: int) -> list[object]:
        self.util_since.append(since_us)
        if self.process_util is None or isinstance(self.process_util, int):
            raise self.Error(self.process_util or self.NOT_SUPPORTED)
        fresh = [self._UtilSample(*s) for s in self.process_util if s[1] > since_us]
        if not fresh:
            raise self.Error(self.NOT_FOUND)
        return fresh

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

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (8, 9)

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"580.95.05"
