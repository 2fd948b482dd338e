"""The agent (and the daemon) as a service on each OS: the unit texts, rendered by pure functions.

Tests assert these texts exactly; ``agent.service.install`` writes them and tells the OS.

- Linux: ``mirbadllm-agent.service``, a system unit with its own user and a state directory, the
  file system read-only but for that directory, restarted on failure; exit code 75
  (``EXIT_RESTART``) is the agent asking to be started again after it swapped in an upgrade.
  The daemon runs in the user's session: ``mirbadllm-daemon.service``, a user unit.
- macOS: the LaunchDaemon ``com.mirbadllm.agent`` (``/Library/LaunchDaemons``), kept alive.
- Windows: a service ``MirbadLLMAgent`` under its virtual account ``NT SERVICE\\MirbadLLMAgent``,
  started automatically, restarted on failure; created with ``sc.exe``; its binPath runs
  ``mirbadllm.exe agent service``, which speaks the SCM's protocol (``agent.service.windows``).
"""

from __future__ import annotations

import plistlib
from dataclasses import dataclass

EXIT_RESTART = 75  # EX_TEMPFAIL: "start me again", after the agent swapped in an upgrade
AGENT_PORT = 9443

LINUX_AGENT_UNIT = "mirbadllm-agent.service"
LINUX_DAEMON_UNIT = "mirbadllm-daemon.service"
LINUX_AGENT_USER = "mirbadllm-agent"
LINUX_STATE_DIRECTORY = "mirbadllm-agent"
LINUX_AGENT_HOME = f"/var/lib/{LINUX_STATE_DIRECTORY}"
# The .deb's agent upgrades through the package manager: it leaves the verified package here and
# starts this one oneshot unit (the package's polkit rule lets its user start it, nothing else),
# whose root helper installs that file (installers.linux_deb).
LINUX_UPGRADE_UNIT = "mirbadllm-agent-upgrade.service"
LINUX_DEB_UPGRADE_FILE = f"{LINUX_AGENT_HOME}/upgrades/mirbadllm-agent-upgrade.deb"

MACOS_LABEL = "com.mirbadllm.agent"
MACOS_PLIST = f"/Library/LaunchDaemons/{MACOS_LABEL}.plist"
MACOS_AGENT_HOME = "/Library/Application Support/MirbadLLM/agent"
MACOS_LOG = "/Library/Logs/MirbadLLM/agent.log"

WINDOWS_SERVICE = "MirbadLLMAgent"
WINDOWS_DISPLAY_NAME = "MirbadLLM agent"
WINDOWS_ACCOUNT = f"NT SERVICE\\{WINDOWS_SERVICE}"
WINDOWS_AGENT_HOME = r"C:\ProgramData\MirbadLLM\agent"
WINDOWS_EVENT_SOURCE_KEY = f"HKLM\\SYSTEM\\CurrentControlSet\\Services\\EventLog\\Application\\{WINDOWS_SERVICE}"

DESCRIPTION = "MirbadLLM node agent: runs local language models for a paired MirbadLLM daemon"


@dataclass(frozen=True)
class AgentCommand:
    """How the service starts the agent: the frozen program (or a venv's) and its home."""

    executable: str
    home: str
    port: int = AGENT_PORT
    upgrade_target: str | None = None  # a single-file build (AppImage) the agent may replace itself
    installed_by: str | None = None  # "deb": the package manager owns the program and upgrades it

    def argv(self) -> list[str]:
        argv = [self.executable, "agent", "--home", self.home, "--port", str(self.port)]
        if self.upgrade_target:
            argv += ["--upgrade-target", self.upgrade_target]
        if self.installed_by:
            argv += ["--installed-by", self.installed_by]
        return argv


def _systemd_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-:=+@%" for c in arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped}"'


def systemd_agent_unit(command: AgentCommand, user: str = LINUX_AGENT_USER) -> str:
    """The system unit: own user, state directory, strict sandbox, restart on failure and on 75."""
    exec_start = " ".join(_systemd_quote(a) for a in command.argv())
    return f"""[Unit]
Description={DESCRIPTION}
Documentation=https://github.com/mirbadllm/mirbadllm
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User={user}
Group={user}
ExecStart={exec_start}
StateDirectory={LINUX_STATE_DIRECTORY}
StateDirectoryMode=0700
Environment=MIRBADLLM_HOME={LINUX_AGENT_HOME}
Restart=on-failure
RestartSec=2
RestartForceExitStatus={EXIT_RESTART}
# Runtimes run in their own session so that an agent restart does not stop them; they are
# adopted by the next agent (PID, creation time, executable).
KillMode=process
TimeoutStopSec=20
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes
UMask=0077

[Install]
WantedBy=multi-user.target
"""


def systemd_daemon_user_unit(executable: str) -> str:
    """The daemon in the user's session (``systemctl --user``); the app starts it if it is not up."""
    return f"""[Unit]
Description=MirbadLLM daemon: one OpenAI-compatible endpoint for your local models
After=network.target

[Service]
Type=simple
ExecStart={_systemd_quote(executable)} daemon
Restart=on-failure
RestartSec=2
KillMode=process

[Install]
WantedBy=default.target
"""


def launchd_agent_plist(command: AgentCommand, log_path: str = MACOS_LOG) -> bytes:
    """The LaunchDaemon ``com.mirbadllm.agent``: run at boot, kept alive, logs to one file."""
    document = {
        "Label": MACOS_LABEL,
        "ProgramArguments": command.argv(),
        "EnvironmentVariables": {"MIRBADLLM_HOME": command.home},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 5,
        "ProcessType": "Interactive",
        "AbandonProcessGroup": True,  # runtimes outlive an agent restart and are adopted
        "StandardOutPath": log_path,
        "StandardErrorPath": log_path,
        "WorkingDirectory": command.home,
    }
    return plistlib.dumps(document, fmt=plistlib.FMT_XML, sort_keys=False)


def _windows_binpath(command: AgentCommand) -> str:
    """``mirbadllm.exe agent service ...``: the entry that answers the SCM (``agent.service.windows``)."""
    def quote(arg: str) -> str:
        return f'"{arg}"' if any(c in arg for c in ' \t"') else arg

    executable, _agent, *options = command.argv()
    return " ".join(quote(a) for a in [executable, "agent", "service", *options])


def windows_service_commands(command: AgentCommand) -> list[list[str]]:
    """``sc.exe`` calls that create the service under its virtual account, restart it on failure."""
    return [
        ["sc.exe", "create", WINDOWS_SERVICE, "binPath=", _windows_binpath(command), "start=", "auto",
         "obj=", WINDOWS_ACCOUNT, "DisplayName=", WINDOWS_DISPLAY_NAME],
        ["sc.exe", "description", WINDOWS_SERVICE, DESCRIPTION],
        ["sc.exe", "failure", WINDOWS_SERVICE, "reset=", "86400", "actions=", "restart/2000/restart/5000/restart/30000"],
        ["sc.exe", "failureflag", WINDOWS_SERVICE, "1"],  # a non-zero exit (75 included) counts as failure
        ["sc.exe", "start", WINDOWS_SERVICE],
    ]


def windows_remove_commands() -> list[list[str]]:
    return [["sc.exe", "stop", WINDOWS_SERVICE], ["sc.exe", "delete", WINDOWS_SERVICE]]


def windows_event_source_commands(message_file: str) -> list[list[str]]:
    """Register the Event Log source ``MirbadLLMAgent`` with servicemanager's message texts. The
    service's virtual account may not write this key, so the (elevated) installer does."""
    return [["reg.exe", "add", WINDOWS_EVENT_SOURCE_KEY, "/v", "EventMessageFile", "/t", "REG_SZ", "/d", message_file,
             "/f"],
            ["reg.exe", "add", WINDOWS_EVENT_SOURCE_KEY, "/v", "TypesSupported", "/t", "REG_DWORD", "/d", "7", "/f"]]


def windows_event_source_remove_command() -> list[str]:
    return ["reg.exe", "delete", WINDOWS_EVENT_SOURCE_KEY, "/f"]
