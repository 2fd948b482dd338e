"""``platform_manager``: the service manager of this machine."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

from agent.services.launchd import LaunchdManager
from agent.services.manager import NoServiceManager, Runner, ServiceManager, run_argv
from agent.services.scm import ScmManager
from agent.services.systemd import SystemdManager


def platform_manager(runner: Runner = run_argv) -> ServiceManager:
    """The service manager of this machine: systemd when it booted the machine, launchd on macOS,
    the Service Control Manager on Windows; else ``NoServiceManager`` saying why."""
    system = platform.system()
    if system == "Linux":
        if not Path("/run/systemd/system").is_dir():  # sd_booted(): systemd is not PID 1 here
            return NoServiceManager("systemd does not run this machine (no /run/systemd/system)")
        if shutil.which("systemctl") is None:
            return NoServiceManager("systemctl is not installed")
        return SystemdManager(runner)
    if system == "Darwin":
        return LaunchdManager(runner)
    if system == "Windows":
        return ScmManager(runner)
    return NoServiceManager(f"no service manager is known for {system}")
