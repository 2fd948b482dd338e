"""pywin32's service pieces as the Windows service uses them, recording what reaches Windows.

``FakeScm`` plays the Service Control Manager and pywin32's C host (``PythonService.cpp``):
``StartServiceCtrlDispatcher`` runs ``service_main`` on a thread of its own (instantiate the class,
report START_PENDING, call ``SvcRun``, report STOPPED, or STOPPED with an error if ``SvcRun`` raised)
and blocks until it ends; ``control()`` delivers a control from another thread, as the dispatcher does.
``ServiceFramework`` copies ``win32serviceutil.ServiceFramework``'s status reporting (accepted controls,
check points, wait hints) so the recorded tuples are the ones ``SetServiceStatus`` would get.
"""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any

from agent.service.pywin32_seam import Pywin32

_LOGGER = logging.getLogger(__name__)

OWN_PROCESS = 0x10
STOPPED, START_PENDING, STOP_PENDING, RUNNING = 1, 2, 3, 4
ACCEPT_STOP, ACCEPT_PAUSE_CONTINUE, ACCEPT_SHUTDOWN = 1, 2, 4
CONTROL_STOP, CONTROL_INTERROGATE, CONTROL_SHUTDOWN = 1, 4, 5
ERROR_SERVICE_SPECIFIC_ERROR = 1066

# PythonService.cpp's fixed statuses: (type, state, accepted, win32 exit, service exit, check point, wait hint)
STARTING_STATUS = (OWN_PROCESS, START_PENDING, 0, 0, 0, 0, 5000)
STOPPED_STATUS = (OWN_PROCESS, STOPPED, 0, 0, 0, 0, 0)
STOPPED_ERROR_STATUS = (OWN_PROCESS, STOPPED, 0, ERROR_SERVICE_SPECIFIC_ERROR, 0x20000001, 0, 0)


class Win32Error(Exception):
    """``pywintypes.error``: (winerror, funcname, strerror)."""

    def __init__(self, winerror: int, funcname: str, strerror: str) -> None:
        super().__init__(winerror, funcname, strerror)
        self.winerror = winerror


class FakeScm:
    """The SCM, pywin32's host and ``servicemanager``: statuses, Event Log messages, controls."""

    def __init__(self, started_by_scm: bool = True, service_name: str = "MirbadLLMAgent") -> None:
        self.started_by_scm = started_by_scm
        self.service_name = service_name
        self.statuses: list[tuple[int, ...]] = []
        self.events: list[tuple[str, str]] = []
        self.calls: list[tuple[Any, ...]] = []  # servicemanager calls besides logging
        self._lock = threading.Lock()
        self._klass: type[Any] | None = None
        self._handler: Any = None
        self.win32service = SimpleNamespace(
            SERVICE_WIN32_OWN_PROCESS=OWN_PROCESS, SERVICE_STOPPED=STOPPED, SERVICE_START_PENDING=START_PENDING,
            SERVICE_STOP_PENDING=STOP_PENDING, SERVICE_RUNNING=RUNNING, SERVICE_ACCEPT_STOP=ACCEPT_STOP,
            SERVICE_ACCEPT_PAUSE_CONTINUE=ACCEPT_PAUSE_CONTINUE, SERVICE_ACCEPT_SHUTDOWN=ACCEPT_SHUTDOWN,
            SERVICE_CONTROL_STOP=CONTROL_STOP, SERVICE_CONTROL_INTERROGATE=CONTROL_INTERROGATE,
            SERVICE_CONTROL_SHUTDOWN=CONTROL_SHUTDOWN, SetServiceStatus=self._set_status)
        self.servicemanager = SimpleNamespace(
            Initialize=lambda *a: self.calls.append(("Initialize", *a)),
            PrepareToHostSingle=self._prepare, StartServiceCtrlDispatcher=self._dispatch,
            RegisterServiceCtrlHandler=self._register, SetEventSourceName=lambda n: self.calls.append(("source", n)),
            LogInfoMsg=lambda m: self._log("info", m), LogWarningMsg=lambda m: self._log("warning", m),
            LogErrorMsg=lambda m: self._log("error", m))

    @property
    def pywin32(self) -> Pywin32:
        return Pywin32(_framework(self), self.win32service, self.servicemanager, Win32Error)

    def states(self) -> list[int]:
        with self._lock:
            return [status[1] for status in self.statuses]

    def control(self, code: int) -> Any:
        """A control from the SCM (``sc stop``, shutdown), on the dispatcher's thread."""
        return self._handler(code, 0, None)

    def _set_status(self, handle: object, status: tuple[int, ...]) -> None:
        assert handle == "ssh", "SetServiceStatus needs the handle RegisterServiceCtrlHandler gave"
        with self._lock:
            self.statuses.append(tuple(status))

    def _log(self, kind: str, message: str) -> None:
        with self._lock:
            self.events.append((kind, message))

    def _prepare(self, klass: type[Any]) -> None:
        self.calls.append(("PrepareToHostSingle", klass.__name__))
        self._klass = klass

    def _register(self, name: str, handler: Any, ex: bool) -> str:
        self.calls.append(("RegisterServiceCtrlHandler", name, ex))
        self._handler = handler
        return "ssh"

    def _dispatch(self) -> None:
        if not self.started_by_scm:
            raise Win32Error(1063, "StartServiceCtrlDispatcher",
                             "The service process could not connect to the service controller.")
        host = threading.Thread(target=self._service_main, name="service_main")
        host.start()
        host.join()

    def _service_main(self) -> None:
        assert self._klass is not None, "PrepareToHostSingle first"
        instance = self._klass([self.service_name])
        self._set_status("ssh", STARTING_STATUS)
        try:
            instance.SvcRun()
        except Exception as exc:  # noqa: BLE001 - the host reports any exception as a failed service
            self._log("error", f"SvcRun raised {exc!r}")
            self._set_status("ssh", STOPPED_ERROR_STATUS)
        else:
            self._set_status("ssh", STOPPED_STATUS)


def _framework(scm: FakeScm) -> type[Any]:
    svc, manager = scm.win32service, scm.servicemanager

    class ServiceFramework:
        """``win32serviceutil.ServiceFramework``'s status reporting and control dispatch."""

        _svc_name_: str

        def __init__(self, args: list[str]) -> None:
            self.ssh = manager.RegisterServiceCtrlHandler(args[0], self.ServiceCtrlHandlerEx, True)
            manager.SetEventSourceName(self._svc_name_)
            self.checkPoint = 0

        def GetAcceptedControls(self) -> int:
            accepted = 0
            if hasattr(self, "SvcStop"):
                accepted |= svc.SERVICE_ACCEPT_STOP
            if hasattr(self, "SvcPause") and hasattr(self, "SvcContinue"):
                accepted |= svc.SERVICE_ACCEPT_PAUSE_CONTINUE
            if hasattr(self, "SvcShutdown"):
                accepted |= svc.SERVICE_ACCEPT_SHUTDOWN
            return accepted

        def ReportServiceStatus(self, serviceStatus: int, waitHint: int = 5000,
                                win32ExitCode: int = 0, svcExitCode: int = 0) -> None:
            accepted = 0 if serviceStatus == svc.SERVICE_START_PENDING else self.GetAcceptedControls()
            if serviceStatus in (svc.SERVICE_RUNNING, svc.SERVICE_STOPPED):
                check_point = 0
            else:
                self.checkPoint += 1
                check_point = self.checkPoint
            svc.SetServiceStatus(self.ssh, (svc.SERVICE_WIN32_OWN_PROCESS, serviceStatus, accepted,
                                            win32ExitCode, svcExitCode, check_point, waitHint))

        def ServiceCtrlHandlerEx(self, control: int, event_type: int, data: object) -> Any:
            if control == svc.SERVICE_CONTROL_STOP:
                return self.SvcStop()  # type: ignore[attr-defined]
            if control == svc.SERVICE_CONTROL_SHUTDOWN:
                return self.SvcShutdown()  # type: ignore[attr-defined]
            if control == svc.SERVICE_CONTROL_INTERROGATE:
                return self.ReportServiceStatus(svc.SERVICE_RUNNING)
            return None

    return ServiceFramework
