"""Applying a staged update: replacing the installed program is per OS, behind ``Installer``.

Only the Linux AppImage is implemented: the new file is copied beside the running one and renamed
over it (one atomic ``os.replace``, so the path always holds a whole program), the previous one
kept as ``NAME.old``. The .deb, the macOS .dmg and the Windows installer say they are not
supported yet instead of half-working.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from daemon.api.updates.feed import file_sha256
from daemon.api.updates.staging import StagedUpdate, UpdateError

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


class AppImageInstaller:
    platform = "linux-x86_64-appimage"
    unsupported: str | None = None

    def __init__(self, target: Path) -> None:
        self.target = target

    @property
    def previous(self) -> Path:
        return self.target.with_name(self.target.name + ".old")

    def apply(self, staged: StagedUpdate) -> Path:
        if staged.platform != self.platform:
            raise UpdateError("install", f"Install failed: {staged.path.name} is a {staged.platform} build, "
                                         f"this is a {self.platform}")
        if file_sha256(staged.path) != staged.sha256:  # the staging folder is user-writable
            raise UpdateError("checksum", f"Checksum check failed: the staged {staged.path.name} changed since "
                                          "it was verified; check for updates again")
        new = self.target.with_name(f".{self.target.name}.new")
        try:
            shutil.copyfile(staged.path, new)
            os.chmod(new, 0o755)
            with new.open("rb") as fh:
                os.fsync(fh.fileno())
            self.previous.unlink(missing_ok=True)
            try:
                os.link(self.target, self.previous)
            except OSError:
                shutil.copy2(self.target, self.previous)
            os.replace(new, self.target)
        except OSError as exc:
            new.unlink(missing_ok=True)
            raise UpdateError("install", f"Install failed: could not replace {self.target}: {exc}") from exc
        _LOGGER.info("installed MirbadLLM %s at %s (previous kept as %s)", staged.version, self.target,
                     self.previous.name)
        return self.target

    def restart_command(self, program: Path, pid: int) -> list[str]:
        # The new program must start after this one has gone: a second instance would only raise
        # this one's window (single_instance.py) and exit.
        script = 'while kill -0 "$1" 2>/dev/null; do sleep 0.2; done; exec "$2"'
        return ["/bin/sh", "-c", script, "mirbadllm-restart", str(pid), str(program)]


class UnsupportedInstaller:
    def __init__(self, platform: str, reason: str) -> None:
        self.platform = platform
        self.unsupported: str | None = reason

    def apply(self, staged: StagedUpdate) -> Path:
        raise UpdateError("install", f"Install failed: {self.unsupported}")

    def restart_command(self, program: Path, pid: int) -> list[str]:
        raise UpdateError("install", f"Install failed: {self.unsupported}")


def installer_for_this_os(platform: str | None = None, environ: Mapping[str, str] | None = None) -> Installer:
    """The installer for how this copy of MirbadLLM was installed."""
    platform = platform or sys.platform
    environ = os.environ if environ is None else environ
    if platform.startswith("linux"):
        appimage = environ.get("APPIMAGE")  # set by the AppImage runtime to the .AppImage file
        if appimage:
            return AppImageInstaller(Path(appimage))
        return UnsupportedInstaller("linux-x86_64-deb", "updating this installation is not supported yet: "
                                    "install the new .deb with your package manager, or update your checkout")
    if platform == "darwin":
        return UnsupportedInstaller("macos-arm64-dmg", "installing updates is not supported on macOS yet: "
                                    "download the new .dmg from the release page")
    if platform.startswith("win"):
        return UnsupportedInstaller("windows-x86_64-exe", "installing updates is not supported on Windows yet: "
                                    "download the new installer from the release page")
    return UnsupportedInstaller(platform, f"installing updates is not supported on {platform} yet")
