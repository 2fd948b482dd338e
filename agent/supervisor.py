"""One supervisor per instance: the only owner of that instance's runtime process.

States are ``stopped -> starting -> ready -> stopping -> stopped``, plus ``failed``. Every
transition is made under one lock; a background task per run waits for readiness and then for an
exit nobody asked for (which makes the instance ``failed``, with the exit code and last log lines).
A model's instance and a helper's rpc-server (``agent.rpc.servers``) are supervised alike: only the
``wait_ready`` differs (the driver's probe; for an rpc-server, its port taking a connection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from agent.api.models import InstanceInfo, InstanceState, LaunchSpec
from agent.logring import LogRing
from agent.records import ProcessRecord
from agent.runtimes.driver import RuntimeUnusable
from agent.runtimes.run import RuntimeRun, StartFailed
from core.tasks import cancel_and_wait

_LOGGER = logging.getLogger(__name__)

LIVE_STATES = frozenset({InstanceState.STARTING, InstanceState.READY, InstanceState.STOPPING})
KILL_SILENT_AFTER_S = 5.0


# The driver's wait for readiness (``RuntimeDriver.wait_ready``): returns once ready, else StartFailed.
WaitReady = Callable[[RuntimeRun, aiohttp.ClientSession, float], Awaitable[None]]


class AlreadyRunning(Exception):
    """The instance has a live process; stop it first."""


class InstanceSupervisor:
    """Owns one instance id: its current run, its state and its log ring."""

    def __init__(self, instance_id: str, on_change: Callable[[], Awaitable[None]],
                 session: Callable[[], aiohttp.ClientSession], wait_ready: WaitReady) -> None:
        self.instance_id = instance_id
        self.logs = LogRing()
        self._on_change = on_change
        self._session = session
        self._wait_ready = wait_ready
        self._lock = asyncio.Lock()
        self._state = InstanceState.STOPPED
        self._run: RuntimeRun | None = None
        self._task: asyncio.Task[None] | None = None
        self._facts: dict[str, Any] = {}  # error, last_log_lines, exit_code, stop_requested, adopted
        self._spec_facts: dict[str, Any] = {}  # served_name, model_path, argv, config_hash

    @property
    def state(self) -> InstanceState:
        return self._state

    @property
    def busy(self) -> bool:
        return self._state in LIVE_STATES

    @property
    def run(self) -> RuntimeRun | None:
        """The live run, if any."""
        return self._run if self.busy else None

    def info(self) -> InstanceInfo:
        run = self.run
        live: dict[str, Any] = {}
        if run is not None:
            live = {"pid": run.pid, "port": run.port, "endpoint": run.endpoint, "api_key": run.api_key,
                    "started_at": run.record.started_at, "backend": run.record.backend,
                    "offload": run.record.offload}
        return InstanceInfo(instance_id=self.instance_id, state=self._state,
                            **{**self._spec_facts, **self._facts, **live})

    async def _transition(self, state: InstanceState, **facts: Any) -> None:
        """Enter ``state`` (the caller holds the lock) and tell the manager."""
        _LOGGER.info("instance %s: %s -> %s", self.instance_id, self._state.value, state.value)
        self._state = state
        self._facts.update(facts)
        await self._on_change()

    def _reset(self, adopted: bool) -> None:
        self._facts = {"error": None, "last_log_lines": [], "exit_code": None,
                       "stop_requested": False, "adopted": adopted}

    def _remember(self, run: RuntimeRun) -> None:
        record = run.record
        self._spec_facts = {"served_name": record.served_name, "model_path": record.model_path,
                            "argv": list(record.argv), "config_hash": record.config_hash}

    async def start(self, spec: LaunchSpec, launch: Callable[[LogRing], RuntimeRun]) -> InstanceInfo:
        """Spawn through ``launch`` and return at once in ``starting`` (or ``failed``)."""
        return await self.spawn(launch, spec.startup_timeout_s, served_name=spec.served_name,
                                model_path=spec.model_path)

    async def spawn(self, launch: Callable[[LogRing], RuntimeRun], startup_timeout_s: float,
                    served_name: str = "", model_path: str = "") -> InstanceInfo:
        """``start`` without a model's spec (an rpc-server): ``failed`` at once when ``launch`` raises."""
        async with self._lock:
            if self.busy:
                raise AlreadyRunning(f"instance {self.instance_id} is {self._state.value}; stop it first")
            try:
                run = launch(self.logs)
            except (OSError, RuntimeUnusable) as exc:  # the executable cannot be run (here)
                self._reset(adopted=False)
                self._spec_facts = {"served_name": served_name, "model_path": model_path}
                error = str(exc) if isinstance(exc, RuntimeUnusable) else f"cannot start the runtime: {exc}"
                await self._transition(InstanceState.FAILED, error=error)
                return self.info()
            self._reset(adopted=False)
            self._run = run
            self._remember(run)
            await self._transition(InstanceState.STARTING)
            self._task = asyncio.create_task(self._lifecycle(run, startup_timeout_s),
                                             name=f"supervise {self.instance_id}")
            return self.info()

    async def adopt(self, run: RuntimeRun) -> None:
        """Take over a live process from an earlier agent; ready again once its driver says so."""
        async with self._lock:
            self._reset(adopted=True)
            self._run = run
            self._remember(run)
            await self._transition(InstanceState.STARTING)
            self._task = asyncio.create_task(self._lifecycle(run, run.record.startup_timeout_s),
                                             name=f"supervise {self.instance_id}")

    async def found_failed(self, record: ProcessRecord, error: str, lines: list[str], exit_code: int | None) -> None:
        """An earlier agent's runtime that exited while no agent watched (a container Docker still
        holds): ``failed`` with its exit, as if this agent had seen it go."""
        async with self._lock:
            if self.busy:
                return
            self._reset(adopted=True)
            self._run = None
            self._spec_facts = {"served_name": record.served_name, "model_path": record.model_path,
                                "argv": list(record.argv), "config_hash": record.config_hash}
            await self._transition(InstanceState.FAILED, error=error, last_log_lines=lines, exit_code=exit_code)

    async def _lifecycle(self, run: RuntimeRun, startup_timeout_s: float) -> None:
        try:
            await self._wait_ready(run, self._session(), startup_timeout_s)
        except StartFailed as exc:
            async with self._lock:
                if self._run is run and self._state is InstanceState.STARTING:
                    code = await run.terminate(KILL_SILENT_AFTER_S)
                    await self._fail(str(exc), exc.lines, exc.exit_code if exc.exit_code is not None else code)
            return
        async with self._lock:
            if self._run is not run or self._state is not InstanceState.STARTING:
                return
            await self._transition(InstanceState.READY)
        code = await run.wait_exit()
        async with self._lock:
            if self._run is run and self.state is InstanceState.READY:
                _LOGGER.warning("instance %s: the runtime stopped on its own", self.instance_id)
                await self._fail(run.exit_message(code), run.last_lines(), code)

    async def _fail(self, error: str, lines: list[str], exit_code: int | None) -> None:
        _LOGGER.warning("instance %s failed: %s", self.instance_id, error)
        self._run = None
        await self._transition(InstanceState.FAILED, error=error, last_log_lines=lines, exit_code=exit_code)

    async def stop(self, timeout: float) -> InstanceInfo:
        """Stop the runtime (SIGTERM, SIGKILL after ``timeout``); a failed instance becomes stopped."""
        async with self._lock:
            run = self.run
            if run is None:
                if self._state is InstanceState.FAILED:  # stopping a failure acknowledges it
                    await self._transition(InstanceState.STOPPED, stop_requested=True, error=None,
                                           last_log_lines=[])
                return self.info()
            await self._transition(InstanceState.STOPPING, stop_requested=True)
            await self._cancel_task()
            code = await run.terminate(timeout)
            self._run = None
            await self._transition(InstanceState.STOPPED, exit_code=code, error=None,
                                   last_log_lines=[])
            return self.info()

    async def _cancel_task(self) -> None:
        task, self._task = self._task, None
        if task is not asyncio.current_task():
            await cancel_and_wait(task)

    async def close(self) -> None:
        """Stop supervising (the agent is going away); the runtime process keeps serving."""
        await self._cancel_task()
        if self._run is not None:
            await self._run.close()
