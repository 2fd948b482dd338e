"""Start the app at login, per OS: an XDG autostart ``.desktop`` file on Linux, a LaunchAgent
plist on macOS, an ``HKCU\\...\\Run`` value on Windows.

Every function takes the platform and the base directory, so each OS's file can be tested on any
machine with a temporary directory; the Windows functions take the registry module (``winreg``,
imported only on Windows) so a test hands in a fake.
"""

from __future__ import annotations

import logging
import os
import plistlib
import shlex
import sys
from pathlib import Path
from typing import Any

from core.json_store import write_atomic
from daemon.api.program import program_argv

_LOGGER = logging.getLogger(__name__)

APP_ID = "mirbadllm"
MAC_LABEL = "com.mirbadllm.app"
WINDOWS_RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
WINDOWS_VALUE = "MirbadLLM"


def launch_command(home: Path | None = None) -> list[str]:
    """How login starts the app: this Python running ``mirbadllm`` (the tray comes up, no window)."""
    argv = program_argv("--minimized")
    if home is not None:
        argv += ["--home", str(home)]
    return argv


def linux_desktop_file(config_home: Path | None = None) -> Path:
    base = config_home or Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "autostart" / f"{APP_ID}.desktop"


def mac_plist_file(user_home: Path | None = None) -> Path:
    return (user_home or Path.home()) / "Library" / "LaunchAgents" / f"{MAC_LABEL}.plist"


def desktop_entry(command: list[str]) -> str:
    return ("[Desktop Entry]\nType=Application\nName=MirbadLLM\n"
            "Comment=Local language models behind one OpenAI-compatible endpoint\n"
            f"Exec={shlex.join(command)}\nIcon=mirbadllm\nTerminal=false\n"
            "X-GNOME-Autostart-enabled=true\n")


def is_enabled(platform: str = sys.platform, base: Path | None = None, registry: Any = None) -> bool:
    if platform.startswith("linux"):
        return linux_desktop_file(base).exists()
    if platform == "darwin":
        return mac_plist_file(base).exists()
    if platform == "win32":
        return windows_get(registry) is not None
    return False


def set_enabled(enabled: bool, command: list[str] | None = None, platform: str = sys.platform,
                base: Path | None = None, registry: Any = None) -> None:
    """Write (or remove) the login entry. ``base``: XDG config home on Linux, the home on macOS;
    ``registry``: the ``winreg`` module on Windows (the real one when not given)."""
    command = command or launch_command()
    if platform.startswith("linux"):
        _write_or_remove(linux_desktop_file(base), desktop_entry(command).encode() if enabled else None)
    elif platform == "darwin":
        plist = {"Label": MAC_LABEL, "ProgramArguments": command, "RunAtLoad": True, "ProcessType": "Interactive"}
        _write_or_remove(mac_plist_file(base), plistlib.dumps(plist) if enabled else None)
    elif platform == "win32":
        windows_set(subprocess_line(command) if enabled else None, registry)
    else:
        raise OSError(f"start at login is not supported on {platform}")
    _LOGGER.info("start at login %s", "enabled" if enabled else "disabled")


def subprocess_line(command: list[str]) -> str:
    import subprocess

    return subprocess.list2cmdline(command)


def _write_or_remove(path: Path, content: bytes | None) -> None:
    if content is None:
        path.unlink(missing_ok=True)
        return
    write_atomic(path, content, 0o644)  # as a plain write left it; launchd refuses a plist others can write


def _winreg(registry: Any) -> Any:
    if registry is not None:
        return registry
    import winreg  # type: ignore[import-not-found,unused-ignore]

    return winreg


def windows_get(registry: Any = None) -> str | None:
    """The command line in ``HKCU\\...\\Run\\MirbadLLM``, or None when there is none."""
    winreg = _winreg(registry)
    try:
        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, WINDOWS_RUN_KEY) as key:
            return str(winreg.QueryValueEx(key, WINDOWS_VALUE)[0])
    except OSError:
        return None


def windows_set(line: str | None, registry: Any = None) -> None:
    """Write the Run value (a string), or remove it when ``line`` is None."""
    winreg = _winreg(registry)
    with winreg.CreateKey(winreg.HKEY_CURRENT_USER, WINDOWS_RUN_KEY) as key:
        if line is None:
            try:
                winreg.DeleteValue(key, WINDOWS_VALUE)
            except FileNotFoundError:
                pass
        else:
            winreg.SetValueEx(key, WINDOWS_VALUE, 0, winreg.REG_SZ, line)
