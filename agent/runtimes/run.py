"""One run of a runtime process: its port, key and log, the wait for readiness, exit and stop.

What "ready" means is the driver's (a ``ReadyProbe``: llama.cpp asks ``/health`` and ``/slots``);
the wait is the same for every runtime: a run that exits fails with its exit, and the startup
deadline is silence, not total time: it moves forward while the log file keeps growing, so a big
model that is visibly loading is not killed for being big.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp
import psutil

from agent.logring import LogRing, LogTailer
from agent.paths import AgentPaths
from agent.records import ProcessRecord, find_live_process
from agent.runtimes.process import RuntimeProcess, describe_exit

_LOGGER = logging.getLogger(__name__)

HEALTH_POLL_S = 0.1
HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=2, connect=1)
FAILURE_LINES = 20


class StartFailed(Exception):
    """A runtime did not become ready; ``str()`` is the honest reason."""

    def __init__(self, message: str, lines: list[str], exit_code: int | None = None) -> None:
        super().__init__(message)
        self.lines = lines
        self.exit_code = exit_code


# The driver's message for an exit code, or None for the plain "<runtime> exited N: <last line>".
ExplainExit = Callable[[int | None], str | None]
# One look at a starting run: True once it serves (the driver's meaning of "ready").
ReadyProbe = Callable[["RuntimeRun", aiohttp.ClientSession], Awaitable[bool]]


class RunProcess(Protocol):
    """What a run drives: a ``RuntimeProcess`` (an OS process) or a driver's own handle (a
    container: ``agent.runtimes.vllm.ContainerProcess``)."""

    pid: int
    create_time: float

    def poll(self) -> bool: ...
    async def wait(self) -> int | None: ...
    async def terminate(self, timeout: float) -> int | None: ...
    def executable(self) -> str | None: ...
    def psutil_handle(self) -> psutil.Process | None: ...
    def detach(self) -> None: ...


class RunLog(Protocol):
    """What follows a run's output into the instance's ``LogRing``: a ``LogTailer`` (a log file)
    or a driver's own follower (a container's log stream)."""

    last_growth: float

    def start(self) -> None: ...
    async def stop(self) -> None: ...
    def read_available(self) -> int: ...
    def flush(self) -> None: ...
    def lines(self, count: int) -> list[str]: ...


class RuntimeRun:
    """A started (or adopted) runtime process and what is needed to reach and stop it."""

    def __init__(self, runtime_name: str, process: RunProcess, record: ProcessRecord,
                 tailer: RunLog, adopted: bool = False, explain_exit: ExplainExit | None = None) -> None:
        self.runtime_name = runtime_name
        self.process = process
        self.record = record
        self.tailer = tailer
        self.adopted = adopted
        self._explain_exit = explain_exit
        tailer.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return self.record.port

    @property
    def api_key(self) -> str:
        return self.record.api_key

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.record.port}"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.record.api_key}"}

    def last_lines(self, count: int = FAILURE_LINES) -> list[str]:
        return self.tailer.lines(count)

    def exit_message(self, code: int | None) -> str:
        """The driver's word on this exit when it has one (llama.cpp: SIGILL), else
        'llama-server exited 1: <last non-empty log line>'."""
        explained = self._explain_exit(code) if self._explain_exit is not None else None
        if explained is not None:
            return explained
        last = next((line for line in reversed(self.last_lines()) if line.strip()), "")
        return f"{self.runtime_name} {describe_exit(code)}: {last.strip() or '(no output)'}"

    async def wait_ready(self, session: aiohttp.ClientSession, startup_timeout_s: float,
                         ready: ReadyProbe) -> None:
        """Return once ``ready`` says so; raise ``StartFailed`` on exit or silence."""
        while True:
            if self.process.poll():
                code = await self.wait_exit()
                raise StartFailed(self.exit_message(code), self.last_lines(), code)
            if await ready(self, session):
                self.record.process_exe = self.process.executable() or self.record.process_exe
                self.tailer.read_available()  # the lines that announced readiness, for whoever looks now
                return
            silent_for = time.monotonic() - self.tailer.last_growth
            if silent_for > startup_timeout_s and not self.process.poll():
                last = next((line for line in reversed(self.last_lines()) if line.strip()), "(no output)")
                raise StartFailed(f"{self.runtime_name} was not ready and wrote nothing for "
                                  f"{startup_timeout_s:g} s; last line: {last.strip()}", self.last_lines())
            await asyncio.sleep(HEALTH_POLL_S)

    async def wait_exit(self) -> int | None:
        code = await self.process.wait()
        self.tailer.flush()
        await self.tailer.stop()
        return code

    async def terminate(self, timeout: float) -> int | None:
        """Stop the process group (SIGTERM, SIGKILL after ``timeout``) and stop tailing."""
        code = await self.process.terminate(timeout)
        self.tailer.flush()
        await self.tailer.stop()
        return code

    async def close(self) -> None:
        """Stop watching (the agent is going away); the process keeps running."""
        self.process.detach()
        await self.tailer.stop()


async def adopt_recorded(runtime_name: str, paths: AgentPaths, record: ProcessRecord, ring: LogRing,
                         explain_exit: ExplainExit | None = None) -> RuntimeRun | None:
    """Take over a runtime process a previous agent started (same PID, creation time and executable,
    ``find_live_process``); its log keeps being followed from where it is. None when it is gone."""
    handle = await asyncio.to_thread(find_live_process, record)
    if handle is None:
        return None
    tailer = LogTailer(paths.instance_log(record.instance_id), ring, from_end=True)
    _LOGGER.info("adopted %s for %s: pid %d, port %d", runtime_name, record.instance_id, record.pid, record.port)
    return RuntimeRun(runtime_name, RuntimeProcess.adopt(handle), record, tailer, adopted=True,
                      explain_exit=explain_exit)
