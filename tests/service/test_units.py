"""The agent and daemon service definitions, exactly as each OS gets them."""

from __future__ import annotations

import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.service.units import (
    AgentCommand,
    launchd_agent_plist,
    systemd_agent_unit,
    systemd_daemon_user_unit,
    windows_service_commands,
)

COMMAND = AgentCommand("/usr/bin/mirbadllm", "/var/lib/mirbadllm-agent")

AGENT_UNIT = """[Unit]
Description=MirbadLLM node agent: runs local language models for a paired MirbadLLM daemon
Documentation=https://github.com/mirbadllm/mirbadllm
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=mirbadllm-agent
Group=mirbadllm-agent
ExecStart=/usr/bin/mirbadllm agent --home /var/lib/mirbadllm-agent --port 9443
StateDirectory=mirbadllm-agent
StateDirectoryMode=0700
Environment=MIRBADLLM_HOME=/var/lib/mirbadllm-agent
Restart=on-failure
RestartSec=2
RestartForceExitStatus=75
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


def test_the_agent_system_unit() -> None:
    assert systemd_agent_unit(COMMAND) == AGENT_UNIT


def test_a_path_with_spaces_is_quoted_for_systemd() -> None:
    unit = systemd_agent_unit(AgentCommand("/opt/Mirbad LLM/mirbadllm", "/var/lib/mirbadllm-agent"))
    assert 'ExecStart="/opt/Mirbad LLM/mirbadllm" agent --home' in unit


def test_the_daemon_user_unit() -> None:
    assert systemd_daemon_user_unit("/usr/bin/mirbadllm") == """[Unit]
Description=MirbadLLM daemon: one OpenAI-compatible endpoint for your local models
After=network.target

[Service]
Type=simple
ExecStart=/usr/bin/mirbadllm daemon
Restart=on-failure
RestartSec=2
KillMode=process

[Install]
WantedBy=default.target
"""


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_analyze_verify_accepts_both_units(tmp_path: Path) -> None:
    exe = tmp_path / "mirbadllm"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    agent_unit = systemd_agent_unit(AgentCommand(str(exe), "/var/lib/mirbadllm-agent"))
    units = {"mirbadllm-agent.service": agent_unit,
             "mirbadllm-daemon.service": systemd_daemon_user_unit(str(exe))}
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / n) for n in units)],
                            capture_output=True, text=True, check=False,
                            env={"SYSTEMD_LOG_LEVEL": "notice", "PATH": "/usr/bin:/bin"})
    # verify exits 0 on an unknown key or a bad value and only says so: any line about our files fails.
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if str(tmp_path) in line]
    assert result.returncode == 0 and complaints == []


def test_the_launch_daemon_plist_round_trips() -> None:
    command = AgentCommand("/Applications/MirbadLLM.app/Contents/MacOS/mirbadllm",
                           "/Library/Application Support/MirbadLLM/agent")
    document = plistlib.loads(launchd_agent_plist(command))
    assert document == {
        "Label": "com.mirbadllm.agent",
        "ProgramArguments": ["/Applications/MirbadLLM.app/Contents/MacOS/mirbadllm", "agent", "--home",
                             "/Library/Application Support/MirbadLLM/agent", "--port", "9443"],
        "EnvironmentVariables": {"MIRBADLLM_HOME": "/Library/Application Support/MirbadLLM/agent"},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 5,
        "ProcessType": "Interactive",
        "AbandonProcessGroup": True,
        "StandardOutPath": "/Library/Logs/MirbadLLM/agent.log",
        "StandardErrorPath": "/Library/Logs/MirbadLLM/agent.log",
        "WorkingDirectory": "/Library/Application Support/MirbadLLM/agent",
    }


def test_the_windows_service_runs_under_its_virtual_account() -> None:
    command = AgentCommand(r"C:\Program Files\MirbadLLM\mirbadllm.exe", r"C:\ProgramData\MirbadLLM\agent")
    create, description, failure, flag, start = windows_service_commands(command)
    assert create == ["sc.exe", "create", "MirbadLLMAgent", "binPath=",
                      (r'"C:\Program Files\MirbadLLM\mirbadllm.exe" agent service --home C:\ProgramData\MirbadLLM\agent '
                       "--port 9443"),
                      "start=", "auto", "obj=", r"NT SERVICE\MirbadLLMAgent", "DisplayName=", "MirbadLLM agent"]
    assert failure[3:] == ["reset=", "86400", "actions=", "restart/2000/restart/5000/restart/30000"]
    assert flag == ["sc.exe", "failureflag", "MirbadLLMAgent", "1"] and start[1] == "start"
    assert description[3].startswith("MirbadLLM node agent")


def test_the_unit_asks_for_a_restart_on_exit_75_which_the_agent_uses_after_an_upgrade() -> None:
    from agent.service.units import EXIT_RESTART

    assert EXIT_RESTART == 75 and "RestartForceExitStatus=75" in systemd_agent_unit(COMMAND)
    assert sys.platform  # the text is the same on every build machine
