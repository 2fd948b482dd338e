"""``mirbadllm agent install-service`` / ``uninstall-service``: the agent as this OS's service.

Each is a plan (a list of steps: write this file, run this command) built by a pure function per
OS, so tests assert the plan exactly; ``apply`` carries it out through a ``System`` seam (the real
one runs commands and writes files; tests hand in a fake that records them).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Protocol

from agent.service.pywin32_seam import event_message_file
from agent.service.units import (
    LINUX_AGENT_HOME,
    LINUX_AGENT_UNIT,
    LINUX_AGENT_USER,
    MACOS_AGENT_HOME,
    MACOS_LABEL,
    MACOS_LOG,
    MACOS_PLIST,
    WINDOWS_ACCOUNT,
    WINDOWS_AGENT_HOME,
    AgentCommand,
    launchd_agent_plist,
    systemd_agent_unit,
    windows_event_source_commands,
    windows_event_source_remove_command,
    windows_remove_commands,
    windows_service_commands,
)
from core.json_store import write_atomic

_LOGGER = logging.getLogger(__name__)

SYSTEMD_DIR = "/etc/systemd/system"
GPU_GROUPS = ("video", "render")


class ServiceError(Exception):
    """The service cannot be installed or removed; ``str()`` says what to do."""


@dataclass(frozen=True)
class WriteFile:
    path: str
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class RemoveFile:
    path: str


@dataclass(frozen=True)
class CopyFile:
    source: str
    path: str
    mode: int = 0o755
    owner: str | None = None


@dataclass(frozen=True)
class MakeDir:
    path: str
    mode: int = 0o700


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    ok_codes: tuple[int, ...] = (0,)


Step = WriteFile | CopyFile | RemoveFile | MakeDir | Run


@dataclass(frozen=True)
class Plan:
    steps: list[Step]
    then: list[str] = field(default_factory=list)  # what to tell the user afterwards


def service_home(platform: str) -> str:
    """Where the service keeps the agent's identity, records and models on ``platform``."""
    if platform == "darwin":
        return MACOS_AGENT_HOME
    if platform == "win32":
        return WINDOWS_AGENT_HOME
    return LINUX_AGENT_HOME


def _pairing_hint(executable: str, platform: str) -> list[str]:
    prefix = "" if platform == "win32" else "sudo "
    return [f"Read its pairing code with:  {prefix}{executable} agent pairing-code",
            "then pair it in the app (Nodes → Pair a node) or with `mirbadllm ctl nodes pair ADDRESS CODE`."]


LINUX_AGENT_APPIMAGE = f"{LINUX_AGENT_HOME}/mirbadllm.AppImage"
LINUX_DEB_PROGRAM_DIR = "/opt/mirbadllm"  # the .deb's program: its package manager upgrades it


def linux_agent_command(executable: str) -> AgentCommand:
    """An AppImage is copied into the service's own folder, so the agent can replace it on upgrade;
    the .deb's program is upgraded through the package (``--installed-by deb``)."""
    if executable.endswith(".AppImage"):
        return AgentCommand(LINUX_AGENT_APPIMAGE, LINUX_AGENT_HOME, upgrade_target=LINUX_AGENT_APPIMAGE)
    if PurePath(executable).is_relative_to(LINUX_DEB_PROGRAM_DIR):
        return AgentCommand(executable, LINUX_AGENT_HOME, installed_by="deb")
    return AgentCommand(executable, LINUX_AGENT_HOME)


def linux_install_plan(executable: str, user_exists: bool, groups: Sequence[str]) -> Plan:
    """An AppImage is copied into the service's own folder, so the agent can replace it on upgrade."""
    appimage = executable.endswith(".AppImage")
    command = linux_agent_command(executable)
    unit = systemd_agent_unit(command)
    runs = PurePath(command.executable)
    if runs.is_relative_to("/home") or runs.is_relative_to("/root"):
        # ProtectHome=yes would hide the program from its own service.
        unit = unit.replace("ProtectHome=yes", "ProtectHome=read-only")
    steps: list[Step] = []
    if not user_exists:
        steps.append(Run(("useradd", "--system", "--user-group", "--home-dir", LINUX_AGENT_HOME,
                          "--no-create-home", "--shell", "/usr/sbin/nologin", LINUX_AGENT_USER)))
    present = [g for g in GPU_GROUPS if g in groups]
    if present:  # GPU device nodes are group-owned by video/render on most distributions
        steps.append(Run(("usermod", "--append", "--groups", ",".join(present), LINUX_AGENT_USER)))
    if appimage:
        steps += [MakeDir(LINUX_AGENT_HOME), Run(("chown", f"{LINUX_AGENT_USER}:{LINUX_AGENT_USER}", LINUX_AGENT_HOME)),
                  CopyFile(executable, LINUX_AGENT_APPIMAGE, 0o755, LINUX_AGENT_USER)]
    steps += [WriteFile(f"{SYSTEMD_DIR}/{LINUX_AGENT_UNIT}", unit.encode()),
              Run(("systemctl", "daemon-reload")),
              Run(("systemctl", "enable", "--now", LINUX_AGENT_UNIT))]
    running = (f"The agent runs as the system service {LINUX_AGENT_UNIT} "
               f"(journalctl -u {LINUX_AGENT_UNIT} for its log).")
    return Plan(steps, [running, *_pairing_hint(executable, "linux")])


def linux_uninstall_plan() -> Plan:
    return Plan([Run(("systemctl", "disable", "--now", LINUX_AGENT_UNIT), ok_codes=(0, 1, 5)),
                 RemoveFile(f"{SYSTEMD_DIR}/{LINUX_AGENT_UNIT}"),
                 Run(("systemctl", "daemon-reload"))],
                [(f"Removed {LINUX_AGENT_UNIT}. Its identity and models stay in {LINUX_AGENT_HOME} "
                  f"(delete that folder and the user {LINUX_AGENT_USER} to forget this node).")])


def macos_install_plan(executable: str) -> Plan:
    command = AgentCommand(executable, MACOS_AGENT_HOME)
    return Plan([MakeDir(MACOS_AGENT_HOME), MakeDir(str(PurePath(MACOS_LOG).parent), 0o755),
                 WriteFile(MACOS_PLIST, launchd_agent_plist(command)),
                 Run(("launchctl", "bootout", f"system/{MACOS_LABEL}"), ok_codes=(0, 3, 5, 36, 113)),
                 Run(("launchctl", "bootstrap", "system", MACOS_PLIST))],
                [f"The agent runs as the LaunchDaemon {MACOS_LABEL} (log: {MACOS_LOG})."]
                + _pairing_hint(executable, "darwin"))


def macos_uninstall_plan() -> Plan:
    return Plan([Run(("launchctl", "bootout", f"system/{MACOS_LABEL}"), ok_codes=(0, 3, 5, 36, 113)),
                 RemoveFile(MACOS_PLIST)],
                [f"Removed {MACOS_LABEL}. Its identity and models stay in {MACOS_AGENT_HOME}."])


def windows_install_plan(executable: str, event_message_file: str | None = None) -> Plan:
    """``event_message_file``: servicemanager's message texts, registered for the Event Log source
    (without it the events still carry the agent's text, under a "description not found" note)."""
    command = AgentCommand(executable, WINDOWS_AGENT_HOME)
    create, *rest = windows_service_commands(command)
    grant = ("icacls", WINDOWS_AGENT_HOME, "/inheritance:r", "/grant:r", f"{WINDOWS_ACCOUNT}:(OI)(CI)F",
             "/grant:r", "*S-1-5-32-544:(OI)(CI)F", "/grant:r", "*S-1-5-18:(OI)(CI)F")
    steps: list[Step] = [MakeDir(WINDOWS_AGENT_HOME), Run(tuple(create)), Run(grant)]
    if event_message_file:
        steps += [Run(tuple(argv)) for argv in windows_event_source_commands(event_message_file)]
    steps += [Run(tuple(argv)) for argv in rest]
    return Plan(steps, ["The agent runs as the Windows service MirbadLLMAgent under its own virtual account."]
                + _pairing_hint(executable, "win32"))


def windows_uninstall_plan() -> Plan:
    stop, delete = windows_remove_commands()
    return Plan([Run(tuple(stop), ok_codes=(0, 1062)), Run(tuple(delete)),
                 Run(tuple(windows_event_source_remove_command()), ok_codes=(0, 1))],
                [f"Removed the service. Its identity and models stay in {WINDOWS_AGENT_HOME}."])


class System(Protocol):
    platform: str

    def is_admin(self) -> bool: ...
    def user_exists(self, name: str) -> bool: ...
    def groups(self) -> list[str]: ...
    def run(self, argv: Sequence[str]) -> int: ...
    def write(self, path: str, content: bytes, mode: int) -> None: ...
    def copy(self, source: str, path: str, mode: int, owner: str | None) -> None: ...
    def remove(self, path: str) -> None: ...
    def make_dir(self, path: str, mode: int) -> None: ...


class RealSystem:
    """This machine: runs the commands, writes the files (as root/Administrator)."""

    def __init__(self) -> None:
        self.platform = sys.platform

    def is_admin(self) -> bool:
        if self.platform == "win32":
            import ctypes

            return bool(ctypes.windll.shell32.IsUserAnAdmin())  # type: ignore[attr-defined]
        return os.geteuid() == 0

    def user_exists(self, name: str) -> bool:
        import pwd  # POSIX only

        try:
            pwd.getpwnam(name)
        except KeyError:
            return False
        return True

    def groups(self) -> list[str]:
        import grp  # POSIX only

        return [g.gr_name for g in grp.getgrall()]

    def run(self, argv: Sequence[str]) -> int:
        _LOGGER.info("running %s", " ".join(argv))
        return subprocess.run(list(argv), check=False).returncode

    def write(self, path: str, content: bytes, mode: int) -> None:
        write_atomic(Path(path), content, mode)

    def copy(self, source: str, path: str, mode: int, owner: str | None) -> None:
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(source, tmp)
        os.chmod(tmp, mode)
        if owner is not None:
            shutil.chown(tmp, owner, owner)
        os.replace(tmp, target)

    def remove(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def make_dir(self, path: str, mode: int) -> None:
        Path(path).mkdir(parents=True, exist_ok=True, mode=mode)


def program_executable(platform: str = sys.platform, frozen: bool | None = None) -> str:
    """The command a service should run: the frozen program, or this environment's ``mirbadllm``.

    On Windows only the frozen ``mirbadllm.exe`` will do: a Python environment's ``mirbadllm.exe``
    (and a venv's ``python.exe``) is a launcher that runs the program as a second process, and the
    Service Control Manager talks only to the process it started.
    """
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    appimage = os.environ.get("APPIMAGE")  # set by the AppImage runtime: the file, not its unpacked copy
    if appimage:
        return str(Path(appimage).absolute())
    if frozen:
        return str(Path(sys.executable).resolve())
    if platform == "win32":
        raise ServiceError("the Windows service runs the installed MirbadLLM (mirbadllm.exe from the "
                           "MirbadLLM setup program): a Python environment's mirbadllm.exe is a launcher the "
                           "Service Control Manager cannot talk to. Install MirbadLLM, then run "
                           "`mirbadllm agent install-service` from its folder.")
    name = "mirbadllm"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside.absolute())
    found = shutil.which(name)
    if found:
        return str(Path(found).absolute())
    raise ServiceError("cannot find the mirbadllm program to run as a service: install MirbadLLM first")


def plan_for(action: str, system: System, executable: str) -> Plan:
    install = action == "install"
    if system.platform == "darwin":
        return macos_install_plan(executable) if install else macos_uninstall_plan()
    if system.platform == "win32":
        return windows_install_plan(executable, event_message_file()) if install else windows_uninstall_plan()
    if system.platform.startswith("linux"):
        if install:
            return linux_install_plan(executable, system.user_exists(LINUX_AGENT_USER), system.groups())
        return linux_uninstall_plan()
    raise ServiceError(f"no service manager is known for {system.platform}")


def apply(plan: Plan, system: System, say: Callable[[str], None] = print) -> None:
    if not system.is_admin():
        hint = "from an Administrator prompt" if system.platform == "win32" else "with sudo"
        raise ServiceError(f"installing a system service needs administrator rights: run it again {hint}")
    for step in plan.steps:
        if isinstance(step, WriteFile):
            system.write(step.path, step.content, step.mode)
        elif isinstance(step, CopyFile):
            system.copy(step.source, step.path, step.mode, step.owner)
        elif isinstance(step, RemoveFile):
            system.remove(step.path)
        elif isinstance(step, MakeDir):
            system.make_dir(step.path, step.mode)
        else:
            code = system.run(step.argv)
            if code not in step.ok_codes:
                raise ServiceError(f"`{' '.join(step.argv)}` failed with exit code {code}")
    for line in plan.then:
        say(line)
