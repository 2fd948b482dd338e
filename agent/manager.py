"""``InstanceManager``: every instance's supervisor, the state version and the process records.

Each change of any instance bumps a monotonic ``version`` and wakes the long-poll of
``GET /instances?since=V``; it also rewrites ``processes.json`` so a restarted agent can adopt
what still runs. The runtime is its ``RuntimeDriver``'s (``agent.runtimes.driver``): the manager
checks, picks a loopback port and hands over, and knows nothing of llama.cpp.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp

from agent.api.models import InstanceInfo, InstancesPage, InstanceState, LaunchSpec
from agent.api.runtime_builds import pin_mismatch
from agent.problems import RuntimeVersionMismatch
from agent.records import ProcessRecords
from agent.runtimes.driver import (
    ContainerDriver,
    NoRuntime,
    RuntimeDriver,
    container_driver,
)
from agent.runtimes.drivers import Drivers
from agent.runtimes.ports import FIRST_PORT, find_free_port
from agent.runtimes.run import RuntimeRun
from agent.supervisor import AlreadyRunning, InstanceSupervisor

if TYPE_CHECKING:
    from agent.admission import Admission

_LOGGER = logging.getLogger(__name__)

__all__ = ["AlreadyRunning", "InstanceManager", "UnknownInstance"]


class UnknownInstance(KeyError):
    """No instance with that id was ever started on this agent."""


class InstanceManager:
    """Holds the supervisors of one agent."""

    def __init__(self, drivers: RuntimeDriver | Drivers, records: ProcessRecords, first_port: int = FIRST_PORT,
                 admission: Admission | None = None) -> None:
        self.drivers = drivers if isinstance(drivers, Drivers) else Drivers(drivers)
        self.admission = admission
        self.records = records
        self.first_port = first_port
        self._supervisors: dict[str, InstanceSupervisor] = {}
        self._version = 0
        self._changed = asyncio.Condition()
        self._polls_ended = False
        self._start_lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None

    @property
    def driver(self) -> RuntimeDriver:
        """The first driver (llama.cpp's in the product)."""
        return self.drivers.default

    def driver_for(self, run: RuntimeRun) -> RuntimeDriver:
        """The driver that started (or adopted) ``run``."""
        return self.drivers.get(run.record.runtime)

    async def _wait_ready(self, run: RuntimeRun, session: aiohttp.ClientSession, startup_timeout_s: float) -> None:
        await self.driver_for(run).wait_ready(run, session, startup_timeout_s)

    @property
    def version(self) -> int:
        return self._version

    def session(self) -> aiohttp.ClientSession:
        """The agent's own HTTP session to its runtimes (health checks, metrics)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    def _supervisor(self, instance_id: str) -> InstanceSupervisor:
        sup = self._supervisors.get(instance_id)
        if sup is None:
            sup = InstanceSupervisor(instance_id, self._on_change, self.session, self._wait_ready)
            self._supervisors[instance_id] = sup
        return sup

    def get(self, instance_id: str) -> InstanceSupervisor:
        try:
            return self._supervisors[instance_id]
        except KeyError:
            raise UnknownInstance(instance_id) from None

    def info(self, instance_id: str) -> InstanceInfo:
        return self.get(instance_id).info()

    def page(self) -> InstancesPage:
        return InstancesPage(version=self._version,
                             instances=[s.info() for _, s in sorted(self._supervisors.items())])

    def runs(self) -> dict[str, RuntimeRun]:
        """The live runs (starting, ready or stopping), by instance id."""
        return {i: s.run for i, s in self._supervisors.items() if s.run is not None}

    def ready_runs(self) -> dict[str, RuntimeRun]:
        return {i: s.run for i, s in self._supervisors.items()
                if s.run is not None and s.state.value == "ready"}

    async def _on_change(self) -> None:
        self.records.save({i: run.record for i, run in self.runs().items()})
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def wait_page(self, since: int, timeout: float) -> InstancesPage:
        """The page once ``version`` differs from ``since`` (at once if it does), or at ``timeout``; at
        once after ``end_polls``."""
        await self.wait_for(lambda: self._version != since or self._polls_ended, timeout)
        return self.page()

    async def end_polls(self) -> None:
        """The agent is stopping: every long-poll answers now, and any later one at once, so a stop (an
        upgrade's restart) never waits on the daemon's poll, which it holds open all the time."""
        async with self._changed:
            self._polls_ended = True
            self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds after some change; False on timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout)
            except TimeoutError:
                return predicate()
        return True

    async def start(self, spec: LaunchSpec) -> InstanceInfo:
        """Check the pin and the spec, pick a port and spawn; raises RuntimeVersionMismatch, SpecRejected,
        NoRuntime, AlreadyRunning."""
        driver = self.drivers.get(spec.runtime)  # NoRuntime when this agent has none for it
        if spec.runtime_version:  # the model's pin (agent.api.runtime_builds)
            offer = await driver.offer()
            why = pin_mismatch(spec.runtime_version, offer)
            if why is not None:
                raise RuntimeVersionMismatch(why, details={"wanted": spec.runtime_version, "version": offer.version,
                                                           "digest": offer.digest})
        driver.check(spec)
        # A driver's own step before a start (not a runtime's capability: llama.cpp picks its backend,
        # vLLM pulls its image when missing); NoRuntime with the engine's word when it cannot be had.
        prepare = getattr(driver, "prepare", None)
        if prepare is not None:
            sup = self._supervisor(spec.instance_id)
            if sup.busy:
                raise AlreadyRunning(f"instance {spec.instance_id} is {sup.state.value}; stop it first")
            await prepare(spec, sup.logs)
        async with self._start_lock:
            sup = self._supervisor(spec.instance_id)
            if sup.busy:
                raise AlreadyRunning(f"instance {spec.instance_id} is {sup.state.value}; stop it first")
            if self.admission is not None:  # memory admission; raises AgentProblem when refused
                await self.admission.admit(spec, self.loading, self.wait_for)
            taken = [run.port for run in self.runs().values()]
            port = await asyncio.to_thread(find_free_port, taken, self.first_port)
            return await sup.start(spec, lambda ring: driver.launch(spec, port, ring))

    def loading(self) -> list[tuple[str, InstanceState, int | None]]:
        return [(i, s.state, s.run.pid if s.run is not None else None) for i, s in self._supervisors.items()]

    async def stop(self, instance_id: str, timeout: float = 10.0) -> InstanceInfo:
        sup = self.get(instance_id)
        failed = sup.state is InstanceState.FAILED
        info = await sup.stop(timeout)
        if failed:  # acknowledging a failure also removes an exited container a driver kept of it
            for container in self._containers():
                await container.discard(instance_id)
        return info

    async def adopt_recorded(self) -> list[str]:
        """Adopt each recorded runtime that still runs; drop the other records. The adopted ids."""
        adopted: list[str] = []
        for instance_id, record in self.records.load().items():
            known = instance_id in self._supervisors
            sup = self._supervisor(instance_id)
            try:
                driver = self.drivers.get(record.runtime)
            except NoRuntime:
                run = None
            else:
                run = await driver.adopt(record, sup.logs)
            if run is None:
                if not known:  # a dropped record leaves no instance behind
                    del self._supervisors[instance_id]
                _LOGGER.warning("dropping the record of %s: pid %d is not that runtime any more",
                                instance_id, record.pid)
                continue
            await sup.adopt(run)
            adopted.append(instance_id)
        adopted += await self._adopt_discovered(set(adopted))
        self.records.save({i: run.record for i, run in self.runs().items()})
        return adopted

    async def _adopt_discovered(self, known: set[str]) -> list[str]:
        """Adopt what a driver finds running on its own (containers, by label) and no record named:
        for a container driver, Docker is the truth, not ``processes.json``."""
        adopted: list[str] = []
        for driver in self._containers():
            for record in await driver.discover():
                if record.instance_id in known or self._supervisor_busy(record.instance_id):
                    continue
                sup = self._supervisor(record.instance_id)
                run = await driver.adopt(record, sup.logs)
                if run is None:
                    if sup.state.value == "stopped":
                        del self._supervisors[record.instance_id]
                    continue
                await sup.adopt(run)
                adopted.append(record.instance_id)
            await self._report_exited(driver, known | set(adopted))
        return adopted

    def _containers(self) -> list[ContainerDriver]:
        """The drivers whose runtime's profile says it runs in a container."""
        return [c for c in map(container_driver, self.drivers) if c is not None]

    async def _report_exited(self, driver: ContainerDriver, known: set[str]) -> None:
        """What a container driver finds exited (or dead) with nobody watching: each such instance
        is ``failed`` with Docker's exit code and last log lines; its next start removes the container."""
        for found in await driver.exited():
            instance_id = found.record.instance_id
            if instance_id in known or self._supervisor_busy(instance_id):
                continue
            await self._supervisor(instance_id).found_failed(found.record, found.error, found.lines,
                                                             found.exit_code)

    def _supervisor_busy(self, instance_id: str) -> bool:
        sup = self._supervisors.get(instance_id)
        return sup is not None and sup.busy

    async def close(self) -> None:
        """Stop supervising; runtimes keep running and stay in the records for the next agent."""
        for sup in self._supervisors.values():
            await sup.close()
        for driver in self.drivers:  # a driver's own leaving (llama.cpp's RPC forwards, vLLM's engine)
            closer = getattr(driver, "close", None)
            if closer is not None:
                await closer()
        if self._session is not None:
            await self._session.close()
            self._session = None
