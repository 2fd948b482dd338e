"""The agent as a Windows service, checked here on Linux against a fake SCM (``tests/fakes/fake_pywin32``):
what reaches Windows (the statuses, in order, with their wait hints; the Event Log; the ``sc.exe``
and ``reg.exe`` calls that install it), with the real agent running inside the service."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent import main as agent_main
from agent.paths import AgentPaths
from agent.runtimes.process import ctrl_break_helper_argv
from agent.service import install, windows
from agent.service.install import MakeDir, Run, ServiceError
from tests.fakes.fake_pywin32 import (
    ACCEPT_SHUTDOWN,
    ACCEPT_STOP,
    CONTROL_INTERROGATE,
    CONTROL_SHUTDOWN,
    CONTROL_STOP,
    OWN_PROCESS,
    RUNNING,
    START_PENDING,
    STARTING_STATUS,
    STOP_PENDING,
    STOPPED,
    STOPPED_ERROR_STATUS,
    STOPPED_STATUS,
    FakeScm,
)

CONTROLS = ACCEPT_STOP | ACCEPT_SHUTDOWN
# What the SCM sees before the agent's slow start: the host's START_PENDING, ours with the 30 s hint, RUNNING.
STARTED = [STARTING_STATUS, (OWN_PROCESS, START_PENDING, 0, 0, 0, 1, 30_000), (OWN_PROCESS, RUNNING, CONTROLS, 0, 0, 0, 5000)]
STOP_ASKED = (OWN_PROCESS, STOP_PENDING, CONTROLS, 0, 0, 2, 20_000)
AGENT_ENDED = (OWN_PROCESS, STOP_PENDING, CONTROLS, 0, 0, 3, 20_000)


def until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Hosted:
    """``mirbadllm agent service ...`` as the SCM starts it, on a thread; ``code`` once it returned."""

    def __init__(self, scm: FakeScm, argv: list[str], runner: windows.AgentRunner = agent_main.run_in_service) -> None:
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, args=(scm, argv, runner))
        self.thread.start()

    def _run(self, scm: FakeScm, argv: list[str], runner: windows.AgentRunner) -> None:
        self.code = windows.run_service(argv, agent_main.parse_args, runner, scm.pywin32)

    def join(self) -> int | None:
        self.thread.join(30)
        assert not self.thread.is_alive(), "the service did not stop"
        return self.code


def test_running_is_reported_before_the_agent_starts_and_a_stop_ends_it_gracefully(tmp_path: Path) -> None:
    scm, port, seen_at_start = FakeScm(), free_port(), []

    def agent(args: argparse.Namespace, attach: windows.AttachStop) -> int:
        seen_at_start.append(scm.states())
        return agent_main.run_in_service(args, attach)

    hosted = Hosted(scm, ["--home", str(tmp_path), "--host", "127.0.0.1", "--port", str(port), "--no-mdns"], agent)
    until(lambda: accepts(port), "the agent listening inside the service")
    assert seen_at_start == [[START_PENDING, START_PENDING, RUNNING]]  # RUNNING came before the slow start
    assert AgentPaths(tmp_path).pairing_code_file.exists()  # `mirbadllm agent pairing-code` can show it
    assert scm.statuses == STARTED
    scm.control(CONTROL_INTERROGATE)
    assert scm.statuses[-1] == STARTED[-1]

    scm.control(CONTROL_STOP)
    assert hosted.join() == 0
    assert scm.statuses == [*STARTED, STARTED[-1], STOP_ASKED, AGENT_ENDED, STOPPED_STATUS]
    assert not accepts(port)
    assert ("Initialize", "MirbadLLMAgent", None) in scm.calls
    assert [kind for kind, _ in scm.events] == ["info", "info"]
    assert scm.events[0][1] == f"MirbadLLMAgent started: the agent in {tmp_path} on port {port}"
    assert scm.events[1][1].startswith("MirbadLLMAgent stopped; its runtimes keep serving")
    assert "agent waiting to be paired" in (tmp_path / "logs" / "agent.log").read_text()  # its own log file


def agent_until_stopped(started: threading.Event, release: threading.Event) -> windows.AgentRunner:
    """A stand-in agent that is slow to start, then serves until its stop callback runs."""

    def run(args: argparse.Namespace, attach: windows.AttachStop) -> int:
        started.set()
        release.wait(30)

        async def serve() -> int:
            stop = asyncio.Event()
            attach(asyncio.get_running_loop(), stop.set)
            await stop.wait()
            return 0

        return asyncio.run(serve())

    return run


def test_a_stop_during_the_slow_start_is_kept_until_the_agent_can_take_it(tmp_path: Path) -> None:
    scm, started, release = FakeScm(), threading.Event(), threading.Event()
    hosted = Hosted(scm, ["--home", str(tmp_path)], agent_until_stopped(started, release))
    assert started.wait(30)
    scm.control(CONTROL_STOP)
    assert scm.statuses[-1] == STOP_ASKED
    release.set()
    assert hosted.join() == 0
    assert scm.states() == [START_PENDING, START_PENDING, RUNNING, STOP_PENDING, STOP_PENDING, STOPPED]


def test_a_machine_shutdown_stops_the_agent_like_a_stop(tmp_path: Path) -> None:
    scm, started, release = FakeScm(), threading.Event(), threading.Event()
    release.set()
    hosted = Hosted(scm, ["--home", str(tmp_path)], agent_until_stopped(started, release))
    assert started.wait(30)
    until(lambda: scm.states()[-1] == RUNNING, "RUNNING")
    scm.control(CONTROL_SHUTDOWN)
    assert hosted.join() == 0 and scm.statuses[-1] == STOPPED_STATUS


def test_an_agent_exiting_75_after_an_upgrade_stops_with_an_error_so_windows_restarts_it(tmp_path: Path) -> None:
    scm = FakeScm()
    assert Hosted(scm, ["--home", str(tmp_path)], lambda args, attach: 75).join() == 0
    assert scm.statuses[-2:] == [(OWN_PROCESS, STOP_PENDING, CONTROLS, 0, 0, 2, 20_000), STOPPED_ERROR_STATUS]
    assert ("error", "MirbadLLMAgent: the agent exited 75; the service's failure actions start it again") in scm.events


def test_an_agent_that_cannot_start_says_why_in_the_event_log(tmp_path: Path) -> None:
    scm = FakeScm()
    hosted = Hosted(scm, ["--home", str(tmp_path), "--no-pairing", "--no-mdns"])
    assert hosted.join() == 0
    errors = [text for kind, text in scm.events if kind == "error"]
    assert errors[0].startswith("agent.main: the agent cannot start: not paired. No CA is pinned")
    assert scm.statuses[-1] == STOPPED_ERROR_STATUS


def test_a_command_line_the_agent_does_not_take_fails_before_running(tmp_path: Path) -> None:
    scm = FakeScm()
    assert Hosted(scm, ["--port", "many"], lambda args, attach: 0).join() == 0
    assert scm.states() == [START_PENDING, START_PENDING, STOPPED]
    assert scm.statuses[-1] == STOPPED_ERROR_STATUS
    assert "not one the agent takes" in scm.events[-1][1]


def test_started_by_hand_it_says_that_the_service_manager_starts_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert windows.run_service([], agent_main.parse_args, agent_main.run_in_service,
                               FakeScm(started_by_scm=False).pywin32) == 2
    assert "only Windows' Service Control Manager starts this" in capsys.readouterr().err
    assert agent_main.main(["service"]) == 2  # here, without pywin32
    assert "runs only as the Windows service" in capsys.readouterr().err


def test_warnings_and_errors_go_to_the_event_log_with_their_level() -> None:
    scm = FakeScm()
    handler = windows.EventLogHandler(scm.servicemanager)
    log = windows._LOGGER
    log.addHandler(handler)
    try:
        log.info("chatter")
        log.warning("runtime %s is slow", "r1")
        log.error("cannot bind")
    finally:
        log.removeHandler(handler)
    assert scm.events == [("warning", "agent.service.windows: runtime r1 is slow"),
                          ("error", "agent.service.windows: cannot bind")]


EXE = r"C:\Program Files\MirbadLLM\mirbadllm.exe"
MESSAGES = r"C:\Program Files\MirbadLLM\_internal\servicemanager.pyd"
EVENT_SOURCE = r"HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\MirbadLLMAgent"


def test_install_registers_the_service_entry_with_restart_on_failure_and_its_event_source() -> None:
    plan = install.windows_install_plan(EXE, MESSAGES)
    assert plan.steps == [
        MakeDir(r"C:\ProgramData\MirbadLLM\agent"),
        Run(("sc.exe", "create", "MirbadLLMAgent", "binPath=",
             rf'"{EXE}" agent service --home C:\ProgramData\MirbadLLM\agent --port 9443',
             "start=", "auto", "obj=", r"NT SERVICE\MirbadLLMAgent", "DisplayName=", "MirbadLLM agent")),
        Run(("icacls", r"C:\ProgramData\MirbadLLM\agent", "/inheritance:r", "/grant:r",
             r"NT SERVICE\MirbadLLMAgent:(OI)(CI)F", "/grant:r", "*S-1-5-32-544:(OI)(CI)F",
             "/grant:r", "*S-1-5-18:(OI)(CI)F")),
        Run(("reg.exe", "add", EVENT_SOURCE, "/v", "EventMessageFile", "/t", "REG_SZ", "/d", MESSAGES, "/f")),
        Run(("reg.exe", "add", EVENT_SOURCE, "/v", "TypesSupported", "/t", "REG_DWORD", "/d", "7", "/f")),
        Run(("sc.exe", "description", "MirbadLLMAgent",
             "MirbadLLM node agent: runs local language models for a paired MirbadLLM daemon")),
        Run(("sc.exe", "failure", "MirbadLLMAgent", "reset=", "86400",
             "actions=", "restart/2000/restart/5000/restart/30000")),
        Run(("sc.exe", "failureflag", "MirbadLLMAgent", "1")),
        Run(("sc.exe", "start", "MirbadLLMAgent")),
    ]


def test_uninstall_stops_deletes_and_forgets_the_event_source() -> None:
    assert install.windows_uninstall_plan().steps == [
        Run(("sc.exe", "stop", "MirbadLLMAgent"), ok_codes=(0, 1062)),
        Run(("sc.exe", "delete", "MirbadLLMAgent")),
        Run(("reg.exe", "delete", EVENT_SOURCE, "/f"), ok_codes=(0, 1)),
    ]


def test_the_service_binpath_runs_what_the_agent_command_line_dispatches() -> None:
    create = install.windows_install_plan(EXE).steps[1]
    assert isinstance(create, Run)
    _executable, rest = create.argv[4].split('" ', 1)
    assert rest.split()[:2] == ["agent", "service"]  # mirbadllm's `agent` -> agent.main's `service`


def test_only_the_installed_program_can_be_the_windows_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("APPIMAGE", raising=False)
    with pytest.raises(ServiceError, match="runs the installed MirbadLLM"):
        install.program_executable("win32", frozen=False)
    assert install.program_executable("win32", frozen=True) == str(Path(sys.executable).resolve())


def test_the_frozen_program_sends_ctrl_break_through_itself() -> None:
    """The frozen mirbadllm.exe takes no ``-c``: a runtime's polite stop runs its own helper entry."""
    assert ctrl_break_helper_argv(4242, EXE, frozen=True) == [EXE, "agent", "ctrl-break", "4242"]
    assert ctrl_break_helper_argv(4242, "python.exe", frozen=False)[:2] == ["python.exe", "-c"]


def test_a_stop_after_the_agent_ended_on_its_own_is_harmless() -> None:
    stop, stopped = windows.ThreadSafeStop(), []

    async def agent() -> None:
        stop.attach(asyncio.get_running_loop(), lambda: stopped.append(True))

    asyncio.run(agent())
    stop.request()  # its loop is closed: nothing to deliver, nothing raised
    assert stop.requested and stopped == []
