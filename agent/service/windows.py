"""The agent as a Windows service: ``mirbadllm agent service --home ... --port ...`` (the binPath
that ``install-service`` registers) answers the Service Control Manager through pywin32.

The SCM kills a service that has not reported SERVICE_RUNNING within 30 s, and the agent's own
start (identity, listening, adopting the runtimes a previous agent left) may take longer. So
``SvcRun``, on the service thread the SCM starts, reports START_PENDING with a wait hint, parses the
command line (a bad binPath fails here, before RUNNING), reports RUNNING, and only then runs the
aiohttp agent on an event loop of its own in that thread. ``SvcStop`` (and ``SvcShutdown``), called
on the dispatcher's thread, report STOP_PENDING and hand the stop to the agent's loop thread-safely;
the agent shuts down as on SIGTERM, leaving its runtimes serving for the next agent to adopt. When
``SvcRun`` returns, pywin32's framework reports STOPPED. A non-zero exit (75 after an upgrade, a
refused start) ends ``SvcRun`` with an exception, which the framework reports as STOPPED with an
error: with ``sc failureflag 1`` that counts as a failure and the failure actions restart it.

Logs: warnings and errors, and the service's start and stop, go to the Application Event Log
(source ``MirbadLLMAgent``); everything at ``--log-level`` goes to ``<home>/logs/agent.log``.

Everything here runs on Linux against the fake pywin32 in ``tests/fakes/fake_pywin32.py``; it has
not run against the real SCM in this repository's tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import logging.handlers
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.paths import AgentPaths, default_home
from agent.service import pywin32_seam
from agent.service.pywin32_seam import ERROR_FAILED_SERVICE_CONTROLLER_CONNECT, Pywin32
from agent.service.units import DESCRIPTION, WINDOWS_DISPLAY_NAME, WINDOWS_SERVICE

_LOGGER = logging.getLogger(__name__)

START_WAIT_HINT_MS = 30_000  # the SCM's own limit; RUNNING follows as soon as the arguments parse
STOP_WAIT_HINT_MS = 20_000  # as systemd's TimeoutStopSec for the same agent
LOG_FILE_BYTES = 5 << 20
LOG_FILE_COUNT = 3

# The agent as the service runs it: its arguments, and a function handing the agent's loop and stop
# callback to the service (``agent.main.serve``'s ``attach_stop``); returns the agent's exit code.
AttachStop = Callable[[asyncio.AbstractEventLoop, Callable[[], None]], None]
AgentRunner = Callable[[argparse.Namespace, AttachStop], int]
ParseArgs = Callable[[list[str]], argparse.Namespace]  # agent.main.parse_args (passed in: no import cycle)


class ServiceExit(Exception):
    """The agent ended with a non-zero code: pywin32 reports STOPPED with an error, the SCM restarts."""


class ThreadSafeStop:
    """A stop asked for on the SCM's thread, delivered to the agent's loop whenever it exists
    (a stop during the slow start is kept and delivered as soon as the loop attaches)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requested = False
        self._target: tuple[asyncio.AbstractEventLoop, Callable[[], None]] | None = None

    @property
    def requested(self) -> bool:
        return self._requested

    def attach(self, loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
        with self._lock:
            self._target = (loop, stop)
            if self._requested:
                loop.call_soon_threadsafe(stop)

    def request(self) -> None:
        with self._lock:
            self._requested = True
            if self._target is not None:
                loop, stop = self._target
                with contextlib.suppress(RuntimeError):  # the agent ended on its own: its loop is closed
                    loop.call_soon_threadsafe(stop)


class EventLogHandler(logging.Handler):
    """Log records to the Application Event Log under the service's source (servicemanager)."""

    def __init__(self, servicemanager: Any, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._servicemanager = servicemanager
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if record.levelno >= logging.ERROR:
                self._servicemanager.LogErrorMsg(text)
            elif record.levelno >= logging.WARNING:
                self._servicemanager.LogWarningMsg(text)
            else:
                self._servicemanager.LogInfoMsg(text)
        except Exception:  # noqa: BLE001 - a log call must never take the service down
            self.handleError(record)


def service_logging(servicemanager: Any, log_file: Path, level: str) -> list[logging.Handler]:
    """Root handlers for the service (it has no console): the Event Log for warnings and errors, a
    rotating file for everything at ``level``. Returned so they can be removed when it stops."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.handlers.RotatingFileHandler(log_file, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_COUNT,
                                                   encoding="utf-8")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handlers: list[logging.Handler] = [EventLogHandler(servicemanager), to_file]
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in handlers:
        root.addHandler(handler)
    return handlers


def parse_service_args(parse: ParseArgs, argv: list[str]) -> argparse.Namespace:
    """The agent's own arguments; an error raises ServiceExit (argparse would exit the process)."""
    try:
        return parse(argv)
    except SystemExit as exc:
        raise ServiceExit(f"the service's command line is not one the agent takes: {argv}") from exc


def agent_service_class(win32: Pywin32, argv: list[str], parse: ParseArgs, runner: AgentRunner) -> type[Any]:
    """The ``ServiceFramework`` subclass the dispatcher instantiates; ``argv`` is the agent's command
    line from the binPath (the SCM's start parameters are not used), ``runner`` the agent itself
    (``agent.main.run_in_service``)."""
    svc = win32.win32service
    servicemanager = win32.servicemanager

    framework: Any = win32.service_framework

    class AgentService(framework):  # type: ignore[misc]
        _svc_name_ = WINDOWS_SERVICE
        _svc_display_name_ = WINDOWS_DISPLAY_NAME
        _svc_description_ = DESCRIPTION

        def __init__(self, args: list[str]) -> None:
            super().__init__(args)
            self.stop = ThreadSafeStop()

        def SvcRun(self) -> None:
            self.ReportServiceStatus(svc.SERVICE_START_PENDING, waitHint=START_WAIT_HINT_MS)
            args = parse_service_args(parse, argv)
            self.ReportServiceStatus(svc.SERVICE_RUNNING)
            home = (args.home or default_home()).expanduser().absolute()
            root, level = logging.getLogger(), logging.getLogger().level
            handlers = service_logging(servicemanager, AgentPaths(home).logs_dir / "agent.log", args.log_level)
            try:
                servicemanager.LogInfoMsg(f"{WINDOWS_SERVICE} started: the agent in {home} on port {args.port}")
                code = runner(args, self.stop.attach)
            finally:
                for handler in handlers:
                    root.removeHandler(handler)
                    handler.close()
                root.setLevel(level)
            self.ReportServiceStatus(svc.SERVICE_STOP_PENDING, waitHint=STOP_WAIT_HINT_MS)
            if code != 0:
                servicemanager.LogErrorMsg(f"{WINDOWS_SERVICE}: the agent exited {code}; "
                                           "the service's failure actions start it again")
                raise ServiceExit(f"the agent exited {code}")
            servicemanager.LogInfoMsg(f"{WINDOWS_SERVICE} stopped; its runtimes keep serving until the "
                                      "agent starts again and adopts them")

        def SvcStop(self) -> None:
            self.ReportServiceStatus(svc.SERVICE_STOP_PENDING, waitHint=STOP_WAIT_HINT_MS)
            self.stop.request()

        SvcShutdown = SvcStop  # the machine shuts down: the same graceful stop, within the wait hint

    return AgentService


def run_service(argv: list[str], parse: ParseArgs, runner: AgentRunner, win32: Pywin32 | None = None) -> int:
    """``mirbadllm agent service ...``: host the service in this process until the SCM stops it."""
    if win32 is None:
        try:
            win32 = pywin32_seam.load()
        except ImportError:
            print("mirbadllm agent service: this runs only as the Windows service (pywin32 is missing); "
                  "run `mirbadllm agent` instead", file=sys.stderr)
            return 2
    servicemanager = win32.servicemanager
    servicemanager.Initialize(WINDOWS_SERVICE, None)
    servicemanager.PrepareToHostSingle(agent_service_class(win32, argv, parse, runner))
    try:
        servicemanager.StartServiceCtrlDispatcher()
    except win32.error as exc:
        if getattr(exc, "winerror", None) != ERROR_FAILED_SERVICE_CONTROLLER_CONNECT:
            raise
        print("mirbadllm agent service: only Windows' Service Control Manager starts this. Install the "
              "service with `mirbadllm agent install-service`, or run the agent with `mirbadllm agent`.",
              file=sys.stderr)
        return 2
    return 0
