"""A runtime OS process, whether this agent started it or adopted it from a previous agent.

Runtimes run in their own session (process group) with stdout and stderr going to a log file, so
an agent that dies leaves them serving. A process we started is reaped through ``Popen``; an
adopted one is not our child, so its exit is seen by polling psutil.

What differs per OS is two pure choices, golden-tested for each platform: ``spawn_options``
(POSIX: a new session; Windows: a new process group with a hidden console of its own, broken away
from the agent's job so a job that kills its members on close does not take the runtimes) and
``stop_plan`` (POSIX: SIGTERM to the group, then SIGKILL; Windows: Ctrl-Break to the runtime's
console, then TerminateProcess on the process tree). ``ProcessOps`` makes the OS calls, so a test
can run the Windows plan here with a fake. Adoption is PID + creation time + executable on every
OS (psutil).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

_LOGGER = logging.getLogger(__name__)

EXIT_POLL_S = 0.1

# Windows process-creation flags and console events (subprocess/signal define them on Windows only).
CREATE_NEW_PROCESS_GROUP = 0x00000200
DETACHED_PROCESS = 0x00000008
CREATE_NO_WINDOW = 0x08000000
CREATE_BREAKAWAY_FROM_JOB = 0x01000000
CTRL_BREAK_EVENT = 1
ERROR_ACCESS_DENIED = 5
SIGTERM = 15
SIGKILL = 9

# Ctrl-Break reaches only processes on the sender's console, and a runtime has its own hidden one
# (so it survives the agent and its console). A short helper, started without a console, attaches
# to the runtime's console, shields itself, and raises the event for the runtime's group. Ctrl-C
# would not do: CREATE_NEW_PROCESS_GROUP makes the group ignore it. A runtime with no Ctrl-Break
# handler of its own exits through the default one (ExitProcess), still kinder than TerminateProcess.
CTRL_BREAK_HELPER = (
    "import ctypes, sys\n"
    "k = ctypes.windll.kernel32\n"
    "pid = int(sys.argv[1])\n"
    "ok = k.AttachConsole(pid) and k.SetConsoleCtrlHandler(None, True) "
    "and k.GenerateConsoleCtrlEvent(1, pid)\n"
    "sys.exit(0 if ok else 1)\n"
)
CTRL_BREAK_HELPER_TIMEOUT_S = 10.0


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


@dataclass(frozen=True)
class SpawnOptions:
    """How ``Popen`` starts a runtime on one OS; ``fallback`` is tried when the OS refuses it."""

    start_new_session: bool = False
    creationflags: int = 0
    fallback: SpawnOptions | None = None

    def popen_kwargs(self) -> dict[str, Any]:
        # Popen refuses creationflags off Windows and ignores start_new_session on it.
        if self.creationflags:
            return {"creationflags": self.creationflags}
        return {"start_new_session": self.start_new_session}


def spawn_options(platform: str = sys.platform) -> SpawnOptions:
    """POSIX: its own session. Windows: its own group and hidden console, out of the agent's job.

    A job that forbids breakaway makes CreateProcess fail with access denied; the fallback then
    starts the runtime inside the job (it may die with the agent there, and is restarted).
    """
    if platform == "win32":
        inside_job = CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
        return SpawnOptions(creationflags=inside_job | CREATE_BREAKAWAY_FROM_JOB,
                            fallback=SpawnOptions(creationflags=inside_job))
    return SpawnOptions(start_new_session=True)


@dataclass(frozen=True)
class StopStep:
    """One way of asking a process to go: ``signal_group`` (with ``signal``), ``ctrl_break``,
    or ``kill_tree`` (TerminateProcess on the runtime and its children)."""

    action: str
    signal: int | None = None


@dataclass(frozen=True)
class StopPlan:
    polite: StopStep
    force: StopStep


def stop_plan(platform: str = sys.platform) -> StopPlan:
    """What a stop sends: first the polite step, then, after the timeout, the forceful one."""
    if platform == "win32":
        return StopPlan(polite=StopStep("ctrl_break", CTRL_BREAK_EVENT), force=StopStep("kill_tree"))
    return StopPlan(polite=StopStep("signal_group", SIGTERM), force=StopStep("signal_group", SIGKILL))


def ctrl_break_helper_argv(pid: int, python: str = sys.executable, frozen: bool | None = None) -> list[str]:
    """The helper's command line: ``python -c``, or the frozen program's own ``agent ctrl-break``
    entry (``mirbadllm.exe`` takes no ``-c``)."""
    if bool(getattr(sys, "frozen", False)) if frozen is None else frozen:
        return [python, "agent", "ctrl-break", str(pid)]
    return [python, "-c", CTRL_BREAK_HELPER, str(pid)]


def ctrl_break_main(argv: list[str]) -> int:
    """``mirbadllm agent ctrl-break PID``: CTRL_BREAK_HELPER's steps, in the frozen program (Windows)."""
    import ctypes

    pid = int(argv[0])
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined,unused-ignore]
    ok = (kernel32.AttachConsole(pid) and kernel32.SetConsoleCtrlHandler(None, True)
          and kernel32.GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pid))
    return 0 if ok else 1


class ProcessOps:
    """The OS calls a stop makes. Each returns whether the step reached the process."""

    def signal_group(self, pid: int, sig: int) -> bool:
        try:
            os.killpg(pid, sig)  # type: ignore[attr-defined,unused-ignore]  # POSIX only
        except ProcessLookupError:
            return False
        except PermissionError:  # not a group leader any more: fall back to the process itself
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return False
        return True

    def ctrl_break(self, pid: int) -> bool:
        flags = DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP  # no console of its own to leave
        try:
            done = subprocess.run(ctrl_break_helper_argv(pid), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  creationflags=flags, timeout=CTRL_BREAK_HELPER_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            _LOGGER.warning("cannot send Ctrl-Break to pid %d: %s", pid, exc)
            return False
        return done.returncode == 0

    def kill_tree(self, handle: psutil.Process) -> bool:
        try:
            children = handle.children(recursive=True)
        except psutil.Error:
            children = []
        for proc in [*children, handle]:
            try:
                proc.kill()  # TerminateProcess on Windows
            except psutil.NoSuchProcess:
                pass
            except psutil.Error as exc:
                _LOGGER.warning("cannot kill pid %d: %s", proc.pid, exc)
        return True


def _start(popen: Callable[..., subprocess.Popen[bytes]], options: SpawnOptions, argv: list[str],
           kwargs: dict[str, Any]) -> subprocess.Popen[bytes]:
    try:
        return popen(argv, **kwargs, **options.popen_kwargs())
    except OSError as exc:
        if options.fallback is None or getattr(exc, "winerror", None) != ERROR_ACCESS_DENIED:
            raise
        _LOGGER.warning("the agent's job refuses breakaway (%s): the runtime starts inside it and "
                        "may stop with the agent", exc)
        return _start(popen, options.fallback, argv, kwargs)


class RuntimeProcess:
    """One runtime process and its process group."""

    def __init__(self, pid: int, create_time: float, popen: subprocess.Popen[bytes] | None = None,
                 handle: psutil.Process | None = None, platform: str = sys.platform,
                 ops: ProcessOps | None = None) -> None:
        self.pid = pid
        self.platform = platform
        self._ops = ops or ProcessOps()
        self.create_time = create_time
        self._popen = popen
        self._handle = handle
        self._returncode: int | None = None
        self._exited = False

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path,
              platform: str = sys.platform, popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
              ops: ProcessOps | None = None) -> RuntimeProcess:
        """Start ``argv`` in its own session/group with stdout+stderr appended to ``log_path``."""
        with open(log_path, "ab", buffering=0) as log:
            child = _start(popen, spawn_options(platform), list(argv), {
                "env": dict(env), "cwd": str(cwd), "stdin": subprocess.DEVNULL, "stdout": log,
                "stderr": subprocess.STDOUT, "close_fds": True})
        try:
            handle = psutil.Process(child.pid)
            create_time = handle.create_time()
        except psutil.Error:  # it died already; Popen still holds its exit status
            handle, create_time = None, 0.0
        return cls(child.pid, create_time, popen=child, handle=handle, platform=platform, ops=ops)

    @classmethod
    def adopt(cls, handle: psutil.Process, platform: str = sys.platform,
              ops: ProcessOps | None = None) -> RuntimeProcess:
        return cls(handle.pid, handle.create_time(), handle=handle, platform=platform, ops=ops)

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

    def detach(self) -> None:
        """Stop watching (the agent goes away): nothing runs on its behalf, the process stays."""

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process group (POSIX: the runtime and anything it started)."""
        if self.poll():
            return
        self._ops.signal_group(self.pid, sig)

    async def _send(self, step: StopStep) -> bool:
        """Carry out one stop step; whether it reached the process."""
        if step.action == "signal_group" and step.signal is not None:
            return self._ops.signal_group(self.pid, step.signal)
        if step.action == "ctrl_break":
            return await asyncio.to_thread(self._ops.ctrl_break, self.pid)
        if step.action == "kill_tree" and self._handle is not None:
            return self._ops.kill_tree(self._handle)
        if step.action == "kill_tree" and self._popen is not None:
            self._popen.kill()
            return True
        return False

    async def terminate(self, timeout: float) -> int | None:
        """The polite stop (SIGTERM / Ctrl-Break); the forceful one when the process has not exited
        after ``timeout`` seconds, or at once when the polite one could not be delivered."""
        if self.poll():
            return self._returncode
        plan = stop_plan(self.platform)
        if await self._send(plan.polite):
            try:
                return await asyncio.wait_for(self.wait(), timeout)
            except TimeoutError:
                _LOGGER.warning("pid %d ignored %s for %.1f s: stopping it by force", self.pid,
                                plan.polite.action, timeout)
        elif self.poll():
            return self._returncode
        await self._send(plan.force)
        return await self.wait()
