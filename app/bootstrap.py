"""Find the daemon, or start it: the app's first seconds, Qt-free.

``connect_daemon`` answers ``/healthz`` at the address in ``{home}/daemon.json``; when nothing
answers it starts ``mirbadllm daemon --home HOME`` detached (its own session, output appended to
``{home}/logs/daemon-launch.log``) under a lock file, so two apps launched together start one
daemon, and waits for ``/healthz`` up to a deadline. A failure carries the daemon's last log lines.
``wait_gone`` is the other half (``mirbadllm ctl daemon stop``, the app's restart after an update):
after ``POST /api/shutdown``, until the daemon stopped answering and its process has exited.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import aiohttp
import psutil

from daemon.api.client import DaemonClient
from daemon.api.locations import LAUNCH_LOG, read_admin_token, read_daemon_url
from daemon.api.program import program_argv

_LOGGER = logging.getLogger(__name__)

LOCK_FILE = "app-daemon-start.lock"

HealthCheck = Callable[[str], Awaitable[bool]]
Spawner = Callable[[list[str], Path], Any]  # returns something with .poll() -> int | None


class BootstrapError(Exception):
    """The daemon could not be reached or started; ``log_tail`` and ``advice`` go in the dialog."""

    def __init__(self, message: str, advice: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.advice = advice
        self.log_tail = log_tail


@dataclass(frozen=True)
class DaemonConnection:
    url: str
    token: str
    started_by_us: bool


def daemon_command(home: Path) -> list[str]:
    return program_argv("daemon", "--home", str(home))


def is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


async def http_health(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as session, \
                session.get(url.rstrip("/") + "/healthz", timeout=aiohttp.ClientTimeout(total=3)) as r:
            return r.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


def spawn_detached(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start the daemon so that it outlives the app: own session/process group, no console."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - the child keeps the descriptor
    log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} app starts: {' '.join(argv)}\n".encode())
    log.flush()
    kwargs: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT,
                              "close_fds": True}
    if sys.platform == "win32":
        kwargs["creationflags"] = subprocess.DETACHED_PROCESS | subprocess.CREATE_NEW_PROCESS_GROUP  # type: ignore[attr-defined]
    else:
        kwargs["start_new_session"] = True
    try:
        return subprocess.Popen(argv, **kwargs)
    finally:
        log.close()


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


async def wait_gone(client: DaemonClient, pid: int | None, timeout: float) -> bool:
    """True once the daemon stopped answering and its process (when it runs here) has exited, so a
    following start never finds the old one still holding the port or the home."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while time.monotonic() < deadline:
        if not await client.healthz() and not (pid and _alive(pid)):
            return True
        await asyncio.sleep(delay)  # a foreign process: nothing to wait on but its exit
        delay = min(delay * 2, 0.5)
    return False


class StartLock:
    """An exclusive, non-blocking file lock (``flock`` / ``msvcrt.locking``), polled asynchronously."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[bytes] | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+b")  # noqa: SIM115 - held until release()
        try:
            if sys.platform == "win32":
                import msvcrt

                msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
            else:
                import fcntl

                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            return False
        self._fh = fh
        return True

    async def acquire(self, deadline: float, poll_s: float = 0.1) -> bool:
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()  # closing drops the lock on every OS
            self._fh = None


async def connect_daemon(home: Path, *, url_override: str = "", allow_start: bool = True,
                         timeout_s: float = 45.0, health: HealthCheck = http_health,
                         spawn: Spawner = spawn_detached, poll_s: float = 0.25) -> DaemonConnection:
    """Reach a healthy daemon (starting it when allowed) and read its admin token."""
    url = url_override or read_daemon_url(home)
    started = False
    if not await health(url):
        if not allow_start:
            raise BootstrapError(f"No daemon answers at {url}.",
                                 "Start it with `mirbadllm daemon`, or launch the app without --no-daemon-start.")
        if url_override and not is_loopback(url_override):
            raise BootstrapError(f"The daemon at {url} does not answer.",
                                 "Check that machine, or clear the daemon address in Settings to use this one.")
        url, started = await _start_daemon(home, url_override, timeout_s, health, spawn, poll_s)
    token = await asyncio.get_running_loop().run_in_executor(None, read_admin_token, home)
    if not token:
        raise BootstrapError(f"The daemon answers at {url}, but there is no admin token in {home}.",
                             f"The daemon writes {home / 'admin-token'} when it starts: check that the app "
                             "and the daemon use the same --home, and that the file is readable by you.")
    return DaemonConnection(url=url, token=token, started_by_us=started)


async def _start_daemon(home: Path, url_override: str, timeout_s: float, health: HealthCheck,
                        spawn: Spawner, poll_s: float) -> tuple[str, bool]:
    deadline = time.monotonic() + timeout_s
    lock = StartLock(home / LOCK_FILE)
    if not await lock.acquire(deadline, poll_s):
        raise BootstrapError("Another MirbadLLM app is starting the daemon and has not finished.",
                             "Wait a moment and open MirbadLLM again.")
    try:
        url = url_override or read_daemon_url(home)
        if await health(url):  # whoever held the lock before us started it
            return url, False
        log_path = home / LAUNCH_LOG
        _LOGGER.info("starting the daemon: %s", " ".join(daemon_command(home)))
        process = spawn(daemon_command(home), log_path)
        while time.monotonic() < deadline:
            url = url_override or read_daemon_url(home)
            if await health(url):
                return url, True
            code = process.poll()
            if code is not None:
                raise BootstrapError(f"The daemon exited with code {code} while starting.",
                                     f"Its last lines are below; the full log is {log_path}.",
                                     log_tail(log_path))
            await asyncio.sleep(poll_s)
        raise BootstrapError(f"The daemon did not answer at {url} within {timeout_s:.0f} s.",
                             f"It may still be starting (a large model loading?). See {log_path}, "
                             "or run `mirbadllm daemon` in a terminal to watch it.",
                             log_tail(log_path))
    finally:
        lock.release()
