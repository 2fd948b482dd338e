"""``RuntimeDriver``: the seam every runtime implements (llama.cpp today; vLLM and MLX next).

The agent's generic parts (``InstanceManager``, ``InstanceSupervisor``, ``TelemetryCollector``)
know a runtime only through this protocol and the ``RuntimeRun`` a driver hands back: they check
a spec, pick a loopback port, launch, wait for "ready", adopt after an agent restart and read the
runtime's figures for telemetry. What a runtime is made of (its catalog of executables, its build
checks, its ``/slots``, its flags) stays inside its driver.

The errors a driver raises are these, whichever runtime it drives: ``SpecRejected`` (the spec
cannot run as it is; HTTP 400), ``NoRuntime`` (no executable for it here; HTTP 503),
``RuntimeUnusable`` (this build is known not to run on this machine: the instance fails at once
with that text), ``StartFailed`` (from ``wait_ready``: not ready, with the honest reason).

A runtime whose profile says it runs in a container (``profile(runtime).container``: vLLM) has a
``ContainerDriver``: the engine, not ``processes.json``, is the truth of what runs and what exited.
The manager asks the profile (``container_driver``), not what methods a driver happens to have.
(``prepare`` before a start and ``close`` are a driver's own optional steps, whatever its runtime.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import aiohttp

from agent.api.models import LaunchSpec
from agent.api.runtimes import RuntimeOffer, profile
from agent.logring import LogRing
from agent.records import ProcessRecord
from agent.runtimes.run import RuntimeRun, StartFailed

__all__ = ["ContainerDriver", "ExitedContainer", "Figures", "NoRuntime", "RuntimeDriver", "RuntimeUnusable",
           "SpecRejected", "StartFailed", "container_driver"]

# ``InstanceSample`` field name -> value, what one scrape of a ready runtime says.
Figures = dict[str, float | int | str | None]


class SpecRejected(ValueError):
    """The launch spec cannot be run as it is; the message says what to change."""


class NoRuntime(RuntimeError):
    """No executable for this runtime was found; the message says how to get one."""


class RuntimeUnusable(Exception):
    """This build is known not to run on this machine; ``str()`` says what to do."""


class RuntimeDriver(Protocol):
    """Starts, adopts, waits for and reads one kind of runtime for one agent home."""

    runtime: str
    """The runtime's id (``agent.api.runtimes.RuntimeId``): ``"llamacpp"``, ``"vllm"``, ``"mlx"``."""
    runtime_name: str
    """How messages name the running program: ``"llama-server"``."""

    async def offer(self) -> RuntimeOffer:
        """Whether this runtime can run here, the version it really is, where it is, and why not
        when it cannot (reported per node; a model is placed only where its runtime is offered).
        Called on every status probe: cache what is slow to learn."""
        ...

    def build_command(self, spec: LaunchSpec, port: int) -> list[str]:
        """The runtime's command line after its executable: pure (no I/O), asserted exactly by tests."""
        ...

    def check(self, spec: LaunchSpec) -> None:
        """Refuse, before a port is taken, a spec that could never start here.

        Raises ``SpecRejected`` or ``NoRuntime``."""
        ...

    def launch(self, spec: LaunchSpec, port: int, ring: LogRing) -> RuntimeRun:
        """Spawn the runtime for ``spec`` on 127.0.0.1:``port``, its log followed into ``ring``.

        Returns at once (readiness is ``wait_ready``'s). Raises ``SpecRejected``, ``NoRuntime``,
        ``RuntimeUnusable`` or ``OSError`` (the executable cannot be run)."""
        ...

    async def adopt(self, record: ProcessRecord, ring: LogRing) -> RuntimeRun | None:
        """Re-attach to the runtime a previous agent started; None when ``record`` no longer
        names that very runtime (it exited, or its PID now belongs to another program)."""
        ...

    async def wait_ready(self, run: RuntimeRun, session: aiohttp.ClientSession,
                         startup_timeout_s: float) -> None:
        """Return once ``run`` serves requests; raise ``StartFailed`` when it exits or stays silent
        for ``startup_timeout_s``. Whatever "ready" takes for this runtime happens here."""
        ...

    def parse_metrics(self, text: str) -> Figures:
        """The runtime's ``/metrics`` text as the typed figures telemetry keeps: pure."""
        ...

    async def scrape(self, run: RuntimeRun, session: aiohttp.ClientSession) -> Figures:
        """The figures of a ready run, read from its endpoints with short timeouts; what cannot
        be read is left out (never raises for an unreachable or odd runtime)."""
        ...


@dataclass(frozen=True)
class ExitedContainer:
    """A container of ours that stopped while no agent watched it (exited, or dead): the instance
    is ``failed`` with Docker's exit code and the last lines of Docker's log of it."""

    record: ProcessRecord
    exit_code: int | None
    lines: list[str]
    error: str


class ContainerDriver(RuntimeDriver, Protocol):
    """The driver of a runtime that runs from an image in the node's container engine."""

    async def discover(self) -> list[ProcessRecord]:
        """The running containers of ours on the engine, as records to adopt."""
        ...

    async def exited(self) -> list[ExitedContainer]:
        """The containers of ours that stopped with no agent watching."""
        ...

    async def discard(self, instance_id: str) -> None:
        """Remove the instance's container when it no longer runs (a failure acknowledged)."""
        ...


def container_driver(driver: RuntimeDriver) -> ContainerDriver | None:
    """``driver`` as the container driver its runtime's profile says it is; None for a native runtime."""
    return cast("ContainerDriver", driver) if profile(driver.runtime).container else None
