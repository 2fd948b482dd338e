"""Applying a staged update: replacing the installed program is per OS, behind ``Installer``.

- AppImage: the new file is copied beside the running one and renamed over it (one atomic
  ``os.replace``, so the path always holds a whole program), the previous one kept as ``NAME.old``.
- .deb (a frozen program in ``/opt/mirbadllm``): the package manager installs the verified file,
  asking for the administrator's password through polkit (``pkexec apt-get install``).
- macOS (``/Applications/MirbadLLM.app``): the verified .dmg is attached read-only, the app copied
  over the old one with ``ditto`` into a temporary bundle that then replaces it, and detached.
- Windows: the verified installer runs silently once the app has exited (Inno Setup's
  ``/VERYSILENT``), then the app starts again.

Every installer re-checks the staged file's SHA-256 first: the staging folder is user-writable.
Commands run through a ``Runner`` seam, so the tests assert them exactly.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from app.updates.staging import StagedUpdate
from core.file_swap import previous_of, swap_in
from core.hashing import file_sha256
from core.releases.fetch import UpdateError

_LOGGER = logging.getLogger(__name__)


class Installer(Protocol):
    @property
    def platform(self) -> str:
        """The feed's platform key of the artefact this installer applies."""
        ...

    @property
    def unsupported(self) -> str | None:
        """Why updates cannot be applied here (shown to the user), or None."""
        ...

    def apply(self, staged: StagedUpdate) -> Path:
        """Replace the installed program with ``staged``; returns the program to start. Blocking."""
        ...

    def restart_command(self, program: Path, pid: int) -> list[str]:
        """The command that starts ``program`` once process ``pid`` (this app) has exited."""
        ...


Runner = Callable[[Sequence[str]], int]  # runs a command, returns its exit code

DEB_PROGRAM = Path("/usr/bin/mirbadllm")
DEB_INSTALL_DIR = Path("/opt/mirbadllm")
MACOS_APP = Path("/Applications/MirbadLLM.app")


def run_command(argv: Sequence[str]) -> int:
    return subprocess.run(list(argv), check=False).returncode


def _verified(staged: StagedUpdate, platform: str) -> None:
    if staged.platform != platform:
        raise UpdateError("install", f"Install failed: {staged.path.name} is a {staged.platform} build, "
                                     f"this is a {platform}")
    if file_sha256(staged.path) != staged.sha256:  # the staging folder is user-writable
        raise UpdateError("checksum", f"Checksum check failed: the staged {staged.path.name} changed since "
                                      "it was verified; check for updates again")


def _after_exit(pid: int, *argv: str) -> list[str]:
    """Start ``argv`` once process ``pid`` has gone (a second instance would only raise the first)."""
    script = 'pid="$1"; shift; while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done; exec "$@"'
    return ["/bin/sh", "-c", script, "mirbadllm-restart", str(pid), *argv]


class DebInstaller:
    platform = "linux-x86_64-deb"
    unsupported: str | None = None

    def __init__(self, run: Runner = run_command, elevate: str = "pkexec") -> None:
        self._run = run
        self._elevate = elevate

    def install_argv(self, staged: StagedUpdate) -> list[str]:
        return [self._elevate, "apt-get", "install", "-y", "--reinstall", str(staged.path.absolute())]

    def apply(self, staged: StagedUpdate) -> Path:
        _verified(staged, self.platform)
        code = self._run(self.install_argv(staged))
        if code != 0:
            hint = "the administrator password was not given" if code in (126, 127) else f"exit code {code}"
            raise UpdateError("install", f"Install failed ({hint}): install it by hand with "
                                         f"`sudo apt install {staged.path.absolute()}`")
        _LOGGER.info("installed MirbadLLM %s from %s", staged.version, staged.path.name)
        return DEB_PROGRAM

    def restart_command(self, program: Path, pid: int) -> list[str]:
        return _after_exit(pid, str(program))


class MacInstaller:
    platform = "macos-arm64-dmg"
    unsupported: str | None = None

    def __init__(self, app: Path = MACOS_APP, run: Runner = run_command) -> None:
        self.app = app
        self._run = run

    def plan(self, staged: StagedUpdate, mount: Path) -> list[list[str]]:
        fresh = self.app.with_name(f".{self.app.name}.new")
        return [["hdiutil", "attach", "-readonly", "-nobrowse", "-mountpoint", str(mount), str(staged.path)],
                ["ditto", str(mount / self.app.name), str(fresh)],
                ["hdiutil", "detach", str(mount)]]

    def apply(self, staged: StagedUpdate) -> Path:
        _verified(staged, self.platform)
        mount = staged.path.with_name("mount")
        fresh = self.app.with_name(f".{self.app.name}.new")
        for argv in self.plan(staged, mount):
            if self._run(argv) != 0:
                raise UpdateError("install", f"Install failed: `{' '.join(argv)}` did not succeed")
        old = self.app.with_name(f".{self.app.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        try:
            if self.app.exists():
                os.replace(self.app, old)
            os.replace(fresh, self.app)
        except OSError as exc:
            raise UpdateError("install", f"Install failed: could not replace {self.app}: {exc}") from exc
        shutil.rmtree(old, ignore_errors=True)
        return self.app

    def restart_command(self, program: Path, pid: int) -> list[str]:
        return _after_exit(pid, "open", str(program))


class WindowsInstaller:
    platform = "windows-x86_64-exe"
    unsupported: str | None = None

    def apply(self, staged: StagedUpdate) -> Path:
        _verified(staged, self.platform)
        return staged.path  # Windows cannot replace a running program: the installer runs after exit

    def restart_command(self, program: Path, pid: int) -> list[str]:
        # The installer waits for nothing itself; PowerShell waits for this app, runs the installer
        # silently, then starts the installed app again.
        exe = r"$env:ProgramFiles\MirbadLLM\mirbadllm.exe"
        script = (f"Wait-Process -Id {pid} -ErrorAction SilentlyContinue; "
                  f"Start-Process -Wait -FilePath '{program}' -ArgumentList '/VERYSILENT','/SUPPRESSMSGBOXES',"
                  f"'/NORESTART'; Start-Process -FilePath \"{exe}\"")
        return ["powershell", "-NoProfile", "-NonInteractive", "-Command", script]


def installed_from_deb(executable: str, frozen: bool) -> bool:
    return frozen and Path(executable).resolve().is_relative_to(DEB_INSTALL_DIR)


class AppImageInstaller:
    platform = "linux-x86_64-appimage"
    unsupported: str | None = None

    def __init__(self, target: Path) -> None:
        self.target = target

    @property
    def previous(self) -> Path:
        return previous_of(self.target)

    def apply(self, staged: StagedUpdate) -> Path:
        _verified(staged, self.platform)
        try:
            swap_in(staged.path, self.target, 0o755)
        except OSError as exc:
            raise UpdateError("install", f"Install failed: could not replace {self.target}: {exc}") from exc
        _LOGGER.info("installed MirbadLLM %s at %s (previous kept as %s)", staged.version, self.target,
                     self.previous.name)
        return self.target

    def restart_command(self, program: Path, pid: int) -> list[str]:
        return _after_exit(pid, str(program))


class UnsupportedInstaller:
    def __init__(self, platform: str, reason: str) -> None:
        self.platform = platform
        self.unsupported: str | None = reason

    def apply(self, staged: StagedUpdate) -> Path:
        raise UpdateError("install", f"Install failed: {self.unsupported}")

    def restart_command(self, program: Path, pid: int) -> list[str]:
        raise UpdateError("install", f"Install failed: {self.unsupported}")


def installer_for_this_os(platform: str | None = None, environ: Mapping[str, str] | None = None,
                          executable: str | None = None, frozen: bool | None = None) -> Installer:
    """The installer for how this copy of MirbadLLM was installed."""
    platform = platform or sys.platform
    environ = os.environ if environ is None else environ
    executable = executable or sys.executable
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    if not frozen:
        return UnsupportedInstaller(platform, "this copy runs from source: update it with git pull and "
                                    "make run")
    if platform.startswith("linux"):
        appimage = environ.get("APPIMAGE")  # set by the AppImage runtime to the .AppImage file
        if appimage:
            return AppImageInstaller(Path(appimage))
        if installed_from_deb(executable, frozen):
            return DebInstaller()
        return UnsupportedInstaller("linux-x86_64-deb", "this copy was not installed from the .deb or the "
                                    "AppImage: install the new release the way you installed this one")
    if platform == "darwin":
        return MacInstaller()
    if platform.startswith("win"):
        return WindowsInstaller()
    return UnsupportedInstaller(platform, f"installing updates is not supported on {platform} yet")
