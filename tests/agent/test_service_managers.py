"""The OS service managers' argv and parsers, against recorded outputs of systemctl, launchctl and
sc.exe (their exact text formats; macOS and Windows are not here), and against the real systemd
where this machine runs one."""

from __future__ import annotations

import asyncio
import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.api.services import ServiceState
from agent.services.launchd import LaunchdManager, parse_print_domain
from agent.services.manager import Completed, ServiceCommandFailed, run_argv
from agent.services.scm import ScmManager
from agent.services.systemd import SystemdManager, parse_show

# `systemctl show -p Id,Names,Description,LoadState,ActiveState,SubState,UnitFileState,MainPID --
#  ssh.service docker.service ghost.service` on Ubuntu 24.04 (properties in systemd's own order).
SYSTEMCTL_SHOW = """\
MainPID=1187
Id=ssh.service
Names=ssh.service sshd.service
Description=OpenBSD Secure Shell server
LoadState=loaded
ActiveState=active
SubState=running
UnitFileState=enabled

MainPID=0
Id=docker.service
Names=docker.service
Description=Docker Application Container Engine
LoadState=loaded
ActiveState=failed
SubState=failed
UnitFileState=disabled

MainPID=0
Id=ghost.service
Names=ghost.service
Description=ghost.service
LoadState=not-found
ActiveState=inactive
SubState=dead
UnitFileState=
"""

LIST_UNITS = """\
ssh.service                            loaded    active   running OpenBSD Secure Shell server
docker.service                         loaded    failed   failed  Docker Application Container Engine
"""
LIST_UNIT_FILES = """\
docker.service                             disabled        enabled
getty@.service                             enabled         enabled
ollama.service                             disabled        enabled
ssh.service                                enabled         enabled
sshd.service                               alias           -
"""

LAUNCHCTL_PRINT_SYSTEM = """\
system = {
\ttype = system
\thandle = 0
\tactive count = 512
\tservice count = 389
\tactive service count = 141
\tmaximum allowed shutdown time = 65 s
\tservice stats = 0
\tcreator = launchd[1]
\tcreator euid = 0
\tauxiliary bootstrapper = com.apple.xpc.smd (complete)
\tsecurity context = {
\t\tuid unset
\t\tasid = 0
\t}

\tbringup time = 118 ms
\tdeath port = 0x0

\tsubdomains = {
\t\tpid/1234
\t\tcom.apple.xpc.launchd.domain.system
\t}

\tservices = {
\t\t       0     78 \tcom.apple.SafeEjectGPUStartupDaemon
\t\t     349      - \tcom.apple.locationd
\t\t       0      - \tcom.openssh.sshd
\t\t    4242      - \tcom.ollama.serve
\t\t       0      1 \tcom.example.crashy
\t}

\tunmanaged processes = {
\t\tpid 417
\t}

\tendpoints = {
\t\t       0    com.apple.locationd.registration
\t}
}
"""

LAUNCHCTL_PRINT_SERVICE = """\
system/com.ollama.serve = {
\tactive count = 1
\tpath = /Library/LaunchDaemons/com.ollama.serve.plist
\ttype = LaunchDaemon
\tstate = running

\tprogram = /usr/local/bin/ollama
\targuments = {
\t\t/usr/local/bin/ollama
\t\tserve
\t}

\tdefault environment = {
\t\tPATH => /usr/bin:/bin:/usr/sbin:/sbin
\t}

\tenvironment = {
\t\tXPC_SERVICE_NAME => com.ollama.serve
\t}

\tdomain = system
\tminimum runtime = 10
\texit timeout = 5
\truns = 1
\tpid = 4242
\timmediate reason = speculative
\tforks = 0
\texecs = 1
\tinitialized = 1
\ttrampolined = 1
\tstarted suspended = 0
\tproxy started suspended = 0
\tlast exit code = (never exited)

\tspawn type = daemon (3)
\tjetsam priority = 40
\tjetsam memory limit (active) = (unlimited)
\tproperties = keepalive | runatload | inferred program
}
"""

SC_QUERYEX_ALL = """\

SERVICE_NAME: Appinfo
DISPLAY_NAME: Application Information
        TYPE               : 30  WIN32
        STATE              : 4  RUNNING
                                (STOPPABLE, NOT_PAUSABLE, IGNORES_SHUTDOWN)
        WIN32_EXIT_CODE    : 0  (0x0)
        SERVICE_EXIT_CODE  : 0  (0x0)
        CHECKPOINT         : 0x0
        WAIT_HINT          : 0x0
        PID                : 1324
        FLAGS              :

SERVICE_NAME: ollama
DISPLAY_NAME: Ollama
        TYPE               : 10  WIN32_OWN_PROCESS
        STATE              : 1  STOPPED
        WIN32_EXIT_CODE    : 1067  (0x42b)
        SERVICE_EXIT_CODE  : 0  (0x0)
        CHECKPOINT         : 0x0
        WAIT_HINT          : 0x0
        PID                : 0
        FLAGS              :

SERVICE_NAME: sshd
DISPLAY_NAME: OpenSSH SSH Server
        TYPE               : 10  WIN32_OWN_PROCESS
        STATE              : 1  STOPPED
        WIN32_EXIT_CODE    : 1077  (0x435)
        SERVICE_EXIT_CODE  : 0  (0x0)
        CHECKPOINT         : 0x0
        WAIT_HINT          : 0x0
        PID                : 0
        FLAGS              :
""".replace("\n", "\r\n")

SC_NOT_FOUND = "[SC] EnumQueryServicesStatus:OpenService FAILED 1060:\r\n\r\nThe specified service does not exist as an installed service.\r\n\r\n"


def _sc_state(name: str, code: int, word: str, pid: int) -> str:
    return (f"\r\nSERVICE_NAME: {name}\r\n        TYPE               : 10  WIN32_OWN_PROCESS\r\n"
            f"        STATE              : {code}  {word}\r\n        WIN32_EXIT_CODE    : 0  (0x0)\r\n"
            f"        SERVICE_EXIT_CODE  : 0  (0x0)\r\n        CHECKPOINT         : 0x0\r\n"
            f"        WAIT_HINT          : 0x7d0\r\n        PID                : {pid}\r\n        FLAGS              :\r\n")


class Replay:
    """A ``Runner`` that answers each argv from a script and records the argv it was given."""

    def __init__(self, answers: dict[tuple[str, ...], Completed | list[Completed]]) -> None:
        self.answers = answers
        self.argvs: list[list[str]] = []

    async def __call__(self, argv: list[str], timeout: float) -> Completed:
        self.argvs.append(argv)
        answer = self.answers.get(tuple(argv))
        if answer is None:
            raise AssertionError(f"unexpected argv {argv}")
        if isinstance(answer, list):
            return answer.pop(0) if len(answer) > 1 else answer[0]
        return answer


SHOW = ["systemctl", "show", "--no-pager", "-p",
        "Id,Names,Description,LoadState,ActiveState,SubState,UnitFileState,MainPID", "--"]


async def test_systemd_lists_and_reads_units_from_systemctls_machine_readable_output() -> None:
    units = parse_show(SYSTEMCTL_SHOW)
    assert [u["Id"] for u in units] == ["ssh.service", "docker.service", "ghost.service"]
    show_all = Completed(0, SYSTEMCTL_SHOW)  # ollama.service is not loaded: systemd shows the others
    replay = Replay({
        ("systemctl", "list-units", "--type=service", "--all", "--plain", "--no-legend", "--no-pager"):
            Completed(0, LIST_UNITS),
        ("systemctl", "list-unit-files", "--type=service", "--plain", "--no-legend", "--no-pager"):
            Completed(0, LIST_UNIT_FILES),
        (*SHOW, "ssh.service", "docker.service", "ollama.service"): show_all,
        (*SHOW, "sshd"): Completed(0, SYSTEMCTL_SHOW.split("\n\n")[0] + "\n"),
        (*SHOW, "ghost"): Completed(0, SYSTEMCTL_SHOW.split("\n\n")[2]),
        ("systemctl", "--no-ask-password", "restart", "--", "docker.service"): Completed(0, ""),
        ("systemctl", "--no-ask-password", "stop", "--", "ssh.service"): Completed(
            1, "", "Failed to stop ssh.service: Interactive authentication required.\n"
                   "See system logs and 'systemctl status ssh.service' for details.\n"),
    })
    manager = SystemdManager(replay)
    listed = await manager.list()
    assert [(s.name, s.state, s.enabled) for s in listed] == [
        ("docker.service", ServiceState.FAILED, False), ("ssh.service", ServiceState.RUNNING, True)]
    ssh = await manager.status("sshd")  # asked by its alias
    assert ssh is not None and ssh.name == "ssh.service" and ssh.aliases == ["sshd.service"]
    assert ssh.pid == 1187 and ssh.detail == "active (running)" and ssh.description == "OpenBSD Secure Shell server"
    assert await manager.status("ghost") is None
    await manager.restart("docker.service")
    with pytest.raises(ServiceCommandFailed) as failed:
        await manager.stop("ssh.service")
    assert "Interactive authentication required" in failed.value.message


async def test_launchd_reads_print_system_and_a_jobs_print_and_acts_with_kickstart_and_bootout(
        tmp_path: Path) -> None:
    assert parse_print_domain(LAUNCHCTL_PRINT_SYSTEM)[:2] == [
        ("com.apple.SafeEjectGPUStartupDaemon", None, "78"), ("com.apple.locationd", 349, "-")]
    daemons = tmp_path / "LaunchDaemons"
    daemons.mkdir()
    (daemons / "com.example.idle.plist").write_bytes(plistlib.dumps({"Label": "com.example.idle",
                                                                      "ProgramArguments": ["/bin/true"]}))
    not_found = Completed(113, "", 'Could not find service "com.example.idle" in domain for system\n')
    replay = Replay({
        ("launchctl", "print", "system"): Completed(0, LAUNCHCTL_PRINT_SYSTEM),
        ("launchctl", "print", "system/com.ollama.serve"): Completed(0, LAUNCHCTL_PRINT_SERVICE),
        ("launchctl", "print", "system/com.example.idle"): not_found,
        ("launchctl", "print", "system/com.example.gone"): Completed(113, "", "Could not find service"),
        ("launchctl", "kickstart", "-k", "system/com.ollama.serve"): Completed(0, ""),
        ("launchctl", "bootout", "system/com.ollama.serve"): Completed(0, ""),
        ("launchctl", "bootstrap", "system", str(daemons / "com.example.idle.plist")): Completed(0, ""),
        ("launchctl", "kickstart", "system/com.example.idle"): Completed(0, ""),
    })
    manager = LaunchdManager(replay, daemons)
    listed = {s.name: s for s in await manager.list()}
    assert listed["com.ollama.serve"].state is ServiceState.RUNNING and listed["com.ollama.serve"].pid == 4242
    assert listed["com.openssh.sshd"].state is ServiceState.STOPPED
    assert listed["com.example.crashy"].state is ServiceState.FAILED
    assert listed["com.example.idle"].detail == "not loaded"  # its plist, booted out
    ollama = await manager.status("com.ollama.serve")
    assert ollama is not None and ollama.state is ServiceState.RUNNING and ollama.pid == 4242
    assert ollama.description == "/Library/LaunchDaemons/com.ollama.serve.plist"
    assert await manager.status("com.example.gone") is None
    idle = await manager.status("com.example.idle")
    assert idle is not None and idle.state is ServiceState.STOPPED
    await manager.restart("com.ollama.serve")
    await manager.stop("com.ollama.serve")
    await manager.start("com.example.idle")  # not loaded: bootstrapped from its plist, then kickstarted
    assert replay.argvs[-2:] == [["launchctl", "bootstrap", "system", str(daemons / "com.example.idle.plist")],
                                 ["launchctl", "kickstart", "system/com.example.idle"]]


async def test_the_scm_reads_sc_queryex_and_waits_for_a_pending_start() -> None:
    replay = Replay({
        ("sc.exe", "queryex", "type=", "service", "state=", "all", "bufsize=", "65536"): Completed(0, SC_QUERYEX_ALL),
        ("sc.exe", "queryex", "nope"): Completed(1060, SC_NOT_FOUND),
        ("sc.exe", "start", "ollama"): Completed(0, _sc_state("ollama", 2, "START_PENDING", 5120)),
        ("sc.exe", "queryex", "ollama"): [Completed(0, _sc_state("ollama", 2, "START_PENDING", 5120)),
                                          Completed(0, _sc_state("ollama", 4, "RUNNING", 5120))],
        ("sc.exe", "stop", "Appinfo"): Completed(1062, "[SC] ControlService FAILED 1062:\r\n\r\n"
                                                       "The service has not been started.\r\n"),
        ("sc.exe", "queryex", "Appinfo"): Completed(0, _sc_state("Appinfo", 1, "STOPPED", 0)),
        ("sc.exe", "start", "sshd"): Completed(5, "[SC] StartService: OpenService FAILED 5:\r\n\r\nAccess is denied.\r\n"),
    })
    manager = ScmManager(replay)
    listed = {s.name: s for s in await manager.list()}
    assert listed["Appinfo"].state is ServiceState.RUNNING and listed["Appinfo"].pid == 1324
    assert listed["Appinfo"].display_name == "Application Information"
    assert listed["ollama"].state is ServiceState.FAILED and "1067" in listed["ollama"].detail
    assert listed["sshd"].state is ServiceState.STOPPED  # 1077: never started, not failed
    assert await manager.status("nope") is None
    await manager.start("ollama")  # START_PENDING, then RUNNING
    assert replay.argvs[-3:] == [["sc.exe", "start", "ollama"], ["sc.exe", "queryex", "ollama"],
                                 ["sc.exe", "queryex", "ollama"]]
    await manager.stop("Appinfo")  # 1062 "not started" is what was asked
    with pytest.raises(ServiceCommandFailed) as denied:
        await manager.start("sshd")
    assert "Access is denied" in denied.value.message


def _systemd_running() -> str | None:
    """Why the real systemd cannot be tested here (None: it can)."""
    if shutil.which("systemctl") is None:
        return "no systemctl on this machine"
    state = subprocess.run(["systemctl", "is-system-running"], capture_output=True, text=True, check=False)
    if state.stdout.strip() not in ("running", "degraded", "starting"):
        return f"systemd does not run this machine (systemctl is-system-running: {state.stdout.strip() or state.stderr.strip()})"
    return None


@pytest.mark.skipif(_systemd_running() is not None, reason=str(_systemd_running()))
async def test_the_real_systemd_lists_its_units_and_reads_one_by_an_alias() -> None:
    manager = SystemdManager(run_argv)
    listed = {s.name: s for s in await manager.list()}
    assert listed, "systemd lists no service"
    some = next(iter(listed.values()))
    status = await manager.status(some.name)
    assert status is not None and status.name == some.name
    assert await manager.status("mirbadllm-no-such-unit-x") is None
    assert await asyncio.wait_for(manager.status(some.name), 20) is not None
