"""Which backends this node's llama.cpp build can compute on, found out rather than assumed.

A portable build's manifest names its GPU modules (``backends/vulkan/libggml-vulkan.so``, ...;
``RuntimeExecutable.backends``). For each one the build itself is asked what it sees:
``llama-server --list-devices`` with that one module added (``GGML_BACKEND_PATH``). A module that
will not load, crashes while listing, or sees no device of its kind is unavailable with that reason.
What the listing cannot show (the first real computation: a driver too old for a kernel, no device
memory, a crash in a shader) is learned from the first start on it: ``LlamaCppDriver`` records a
verdict in ``RuntimeChecks`` under the module's own fingerprint, ``ok`` once layers were offloaded
and a token came back, ``failed`` with the reason otherwise. A failed backend stays unavailable
until the build changes, and ``agent.api.backends.pick_backend`` falls back to the next one.

Listing is asked once per build fingerprint and module (it loads a GPU driver: about a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from agent.api.backends import (
    Backend,
    BackendState,
    Device,
    backend_of_device,
    parse_list_devices,
)
from agent.runtimes.catalog import RuntimeExecutable
from agent.runtimes.checks import RuntimeChecks
from agent.runtimes.process import describe_exit

_LOGGER = logging.getLogger(__name__)

LIST_TIMEOUT_S = 60.0
BACKEND_PATH_ENV = "GGML_BACKEND_PATH"  # ggml loads this one module beside what it finds itself
HINTS = {
    Backend.VULKAN: "no Vulkan GPU found (a GPU driver with Vulkan support is needed; a CPU-type device such as "
                    "Mesa's lavapipe is used only when GGML_VK_VISIBLE_DEVICES names it)",
    Backend.CUDA: "no CUDA GPU found (the NVIDIA driver is needed, new enough for this build's CUDA)",
    Backend.METAL: "no Metal GPU found",
}


def module_fingerprint(build_fingerprint: str, backend: Backend) -> str:
    """The verdict key of one backend of one build (the module's bytes are part of the build's files)."""
    return f"{build_fingerprint}+{backend.value}"


class BackendProbe:
    """The backends of the build in use, with their devices and verdicts (one owner of those facts)."""

    def __init__(self, checks: RuntimeChecks, env_for: Callable[[RuntimeExecutable], dict[str, str]],
                 driver_version: Callable[[], str | None] = lambda: None,
                 timeout_s: float = LIST_TIMEOUT_S) -> None:
        self.checks = checks
        self._env_for = env_for  # the runtime's base environment for this build (library dirs)
        self._driver_version = driver_version  # NVIDIA's driver, from NVML, when there is one
        self._timeout_s = timeout_s
        self._listed: dict[tuple[str, Backend], BackendState] = {}
        self._lock = asyncio.Lock()

    async def states(self, exe: RuntimeExecutable, fingerprint: str) -> list[BackendState]:
        """Every backend the build has: the CPU, then each GPU one (listed once, verdicts applied)."""
        states = [BackendState(backend=Backend.CPU, available=True, verified=True)]
        for name in exe.backends:
            backend = Backend(name)
            key = (fingerprint, backend)
            async with self._lock:
                listed = self._listed.get(key)
                if listed is None:
                    listed = await self._list(exe, backend)
                    self._listed[key] = listed
            states.append(self._with_verdict(listed, fingerprint))
        return states

    def _with_verdict(self, listed: BackendState, fingerprint: str) -> BackendState:
        record = self.checks.verdict(module_fingerprint(fingerprint, listed.backend))
        if not listed.available or record is None:
            return listed
        if record.verdict == "ok":
            return listed.model_copy(update={"verified": True, "reason": None})
        return listed.model_copy(update={"available": False, "reason": record.detail or record.verdict})

    def listed_devices(self) -> list[tuple[str, str, int, int]]:
        """The devices of the GPU backends (not CUDA: NVML speaks for NVIDIA) that listed any, as
        last listed: (name, description, total MiB, free MiB)."""
        seen: dict[str, tuple[str, str, int, int]] = {}
        for state in self._listed.values():
            if state.available and state.backend is not Backend.CUDA:
                for d in state.devices:
                    seen.setdefault(d.name, (d.name, d.description, d.memory_total_mib, d.memory_free_mib))
        return list(seen.values())

    def forget(self, fingerprint: str) -> None:
        for key in [k for k in self._listed if k[0] == fingerprint]:
            del self._listed[key]

    def environment(self, exe: RuntimeExecutable, backend: Backend) -> dict[str, str]:
        """The variables that make a llama-server of ``exe`` compute on ``backend`` (its module)."""
        module = exe.backends.get(backend.value)
        return {BACKEND_PATH_ENV: str(module)} if module is not None else {}

    async def _list(self, exe: RuntimeExecutable, backend: Backend) -> BackendState:
        driver = self._driver_version() if backend is Backend.CUDA else None
        env = {**self._env_for(exe), **self.environment(exe, backend)}
        try:
            process = await asyncio.create_subprocess_exec(
                str(exe.path), "--list-devices", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env)
        except OSError as exc:
            return BackendState(backend=backend, available=False, reason=f"cannot run {exe.path}: {exc}")
        try:
            raw, _ = await asyncio.wait_for(process.communicate(), self._timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            return BackendState(backend=backend, available=False, driver=driver,
                                reason=f"listing its devices took over {self._timeout_s:g} s")
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await asyncio.shield(process.wait())
            raise
        output = raw.decode(errors="replace")
        state = interpret_listing(backend, output, process.returncode, exe.backends.get(backend.value))
        state = state.model_copy(update={"driver": driver})
        _LOGGER.info("llama.cpp %s backend: %s", backend.label,
                     ", ".join(f"{d.name} ({d.description})" for d in state.devices) or state.reason)
        return state


def interpret_listing(backend: Backend, output: str, returncode: int | None, module: Path | None) -> BackendState:
    """``--list-devices``' output and exit code -> the backend's state (pure, for tests)."""
    if returncode != 0:
        last = [line for line in output.strip().splitlines() if line.strip()][-1:] or [""]
        return BackendState(backend=backend, available=False,
                            reason=f"llama-server with the {backend.label} module {describe_exit(returncode)} while listing its devices"
                                   f"{f' ({last[0][:200]})' if last[0] else ''}")
    for line in output.splitlines():
        if "failed to load" in line or "failed to initialize backend" in line or "failed to find ggml_backend_init" in line:
            name = module.name if module is not None else backend.label
            return BackendState(backend=backend, available=False,
                                reason=f"the {backend.label} module {name} does not load: "
                                       f"{line.split(': ', 2)[-1].strip()[:240]}")
    devices: list[Device] = [d for d in parse_list_devices(output) if backend_of_device(d.name) is backend]
    if not devices:
        return BackendState(backend=backend, available=False, reason=HINTS.get(backend, "no device found"))
    return BackendState(backend=backend, available=True, devices=devices,
                        reason="not yet seen computing here: the first start checks it")


def inherited_gpu_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The machine's own GPU driver settings, passed to every runtime as they are set for the agent."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k in GPU_SELECTION_ENV or k.startswith(GPU_DRIVER_PREFIXES)}


# Which devices a backend may use (llama.cpp's and the drivers' own switches) and how the drivers
# behave (Mesa's, the Vulkan loader's): the machine's settings, the operator's to set, never a spec's.
GPU_SELECTION_ENV = ("GGML_VK_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                     "ROCR_VISIBLE_DEVICES", "XDG_CACHE_HOME")
GPU_DRIVER_PREFIXES = ("MESA_", "LP_", "GALLIVM_", "RADV_", "VK_")
