"""A runtime OS process, whether this agent started it or adopted it from a previous agent.

Runtimes run in their own session (process group) with stdout and stderr going to a log file, so
an agent that dies leaves them serving. A process we started is reaped through ``Popen``; an
adopted one is not our child, so its exit is seen by polling psutil.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

_LOGGER = logging.getLogger(__name__)

EXIT_POLL_S = 0.1


def describe_exit(code: int | None) -> str:
    """'exited 1', 'was killed by SIGKILL', or 'exited' when the code is unknown (adopted)."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited {code}"


class RuntimeProcess:
    """One runtime process and its process group."""

    def __init__(self, pid: int, create_time: float, popen: subprocess.Popen[bytes] | None = None,
                 handle: psutil.Process | None = None) -> None:
        self.pid = pid
        self.create_time = create_time
        self._popen = popen
        self._handle = handle
        self._returncode: int | None = None
        self._exited = False

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path) -> RuntimeProcess:
        """Start ``argv`` in a new session with stdout+stderr appended to ``log_path``."""
        with open(log_path, "ab", buffering=0) as log:
            popen = subprocess.Popen(
                list(argv), env=dict(env), cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        try:
            handle = psutil.Process(popen.pid)
            create_time = handle.create_time()
        except psutil.Error:  # it died already; Popen still holds its exit status
            handle, create_time = None, 0.0
        return cls(popen.pid, create_time, popen=popen, handle=handle)

    @classmethod
    def adopt(cls, handle: psutil.Process) -> RuntimeProcess:
        return cls(handle.pid, handle.create_time(), handle=handle)

    @property
    def adopted(self) -> bool:
        return self._popen is None

    @property
    def returncode(self) -> int | None:
        """The exit code once exited; always None for an adopted process (not ours to reap)."""
        return self._returncode

    def poll(self) -> bool:
        """True once the process has exited."""
        if self._exited:
            return True
        if self._popen is not None:
            code = self._popen.poll()
            if code is not None:
                self._exited, self._returncode = True, code
        elif self._handle is not None:
            try:
                gone = not self._handle.is_running() or self._handle.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            self._exited = gone
        return self._exited

    async def wait(self) -> int | None:
        """Wait for the exit; the exit code, or None when it cannot be known (adopted)."""
        while not self.poll():
            await asyncio.sleep(EXIT_POLL_S)
        return self._returncode

    def executable(self) -> str | None:
        """The executable the kernel reports for the process (after any ``exec`` by a wrapper)."""
        if self._handle is None or self.poll():
            return None
        try:
            return self._handle.exe() or None
        except psutil.Error:
            return None

    def psutil_handle(self) -> psutil.Process | None:
        return None if self.poll() else self._handle

    def signal_group(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the process group (the runtime and anything it started)."""
        if self.poll():
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # not a group leader any more: fall back to the process itself
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    async def terminate(self, timeout: float) -> int | None:
        """SIGTERM to the group; SIGKILL when it has not exited after ``timeout`` seconds."""
        if self.poll():
            return self._returncode
        self.signal_group(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.wait(), timeout)
        except TimeoutError:
            _LOGGER.warning("pid %d ignored SIGTERM for %.1f s: sending SIGKILL", self.pid, timeout)
        self.signal_group(signal.SIGKILL)
        return await self.wait()
