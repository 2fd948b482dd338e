"""Can Qt open a window here? The Linux desktop prerequisites, checked before a QApplication exists.

Qt aborts the whole process ("This application failed to start because no Qt platform plugin
could be initialized") when its xcb plugin cannot load, most often because a system library is
missing (``libxcb-cursor0`` since Qt 6.5, ``libxcb-icccm4``, ...). Checked beforehand, the app and
``make run`` can name the packages to install instead. Qt-free: the verdict is a pure function of
``ldd``'s output and the environment (``check_platform``); ``probe_ldd`` gathers that output for
the installed PySide6.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

PLUGINS = ("xcb", "wayland")  # the desktop plugins we check; offscreen, vnc, ... need nothing

# soname -> (Debian/Ubuntu package, Fedora package)
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libSM.so.6": ("libsm6", "libSM"),
    "libICE.so.6": ("libice6", "libICE"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
    "libwayland-egl.so.1": ("libwayland-egl1", "libwayland-egl"),
}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s*=>\s*not found", re.MULTILINE)
_DLOPEN_ERROR = re.compile(r"(\S+\.so[.\d]*): cannot open shared object file")


@dataclass(frozen=True)
class PlatformCheck:
    """The verdict: ``ok``, or which plugin cannot load and what it lacks."""

    ok: bool
    plugin: str = ""
    missing: tuple[str, ...] = ()  # sonames
    no_display: bool = False
    unreachable: str = ""  # the display named in the environment, when nothing answers there
    unknown_plugin: bool = False  # PySide6's plugin file was not found: nothing to say, Qt decides

    @property
    def debian_packages(self) -> tuple[str, ...]:
        return _unique(PACKAGES.get(name, (name, name))[0] for name in self.missing)

    @property
    def fedora_packages(self) -> tuple[str, ...]:
        return _unique(PACKAGES.get(name, (name, name))[1] for name in self.missing)

    def message(self) -> str:
        if self.ok:
            return ""
        if self.no_display:
            return ("No display found (neither DISPLAY nor WAYLAND_DISPLAY is set), so the desktop app "
                    "cannot open a window. Run it in a desktop session, or use the daemon from a terminal "
                    "(`mirbadllm daemon`, `mirbadllm ctl status`).")
        if self.unreachable:
            return (f"The desktop app cannot start: nothing answers at the display {self.unreachable} "
                    f"(Qt's {self.plugin} plugin needs a running display server there). Check that variable, "
                    "or use the daemon from a terminal (`mirbadllm ctl status`).")
        return (f"The desktop app cannot start: Qt's {self.plugin} platform plugin needs system libraries "
                f"that are missing ({', '.join(self.missing)}).\n"
                f"  Debian/Ubuntu: sudo apt install {' '.join(self.debian_packages)}\n"
                f"  Fedora:        sudo dnf install {' '.join(self.fedora_packages)}\n"
                "Then open the app again (`mirbadllm`, or `make run`).")


def _unique(names) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    return tuple(dict.fromkeys(names))


def missing_libraries(ldd_output: str) -> tuple[str, ...]:
    """Sonames that ``ldd`` reports as "not found" (or that a failed ``dlopen`` names), in order."""
    found = _NOT_FOUND.findall(ldd_output) + _DLOPEN_ERROR.findall(ldd_output)
    return _unique(found)


def _requested(env: Mapping[str, str]) -> list[str] | None:
    """The plugins Qt will try, in order; None when Qt is asked for one we need not check."""
    value = env.get("QT_QPA_PLATFORM", "").strip()
    if value:
        names = [part.split(":", 1)[0].strip() for part in value.split(";") if part.strip()]
        if not names or names[0] not in PLUGINS:
            return None
        return [n for n in names if n in PLUGINS]
    plugins = []
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE", "").lower() == "wayland":
        plugins.append("wayland")  # Qt 6 prefers wayland in a wayland session, then falls back to xcb
    if env.get("DISPLAY"):
        plugins.append("xcb")
    if not plugins and env.get("WAYLAND_DISPLAY"):
        plugins.append("wayland")
    return plugins


def check_platform(ldd_outputs: Mapping[str, str | None], env: Mapping[str, str],
                   platform: str = "linux", reachable: Mapping[str, bool | None] | None = None) -> PlatformCheck:
    """Whether Qt can open a window: ``ldd_outputs`` maps a plugin ("xcb", "wayland") to the
    ``ldd`` text of its library (None when the plugin file was not found); ``reachable`` maps a
    plugin to whether its display server answered (None or absent: not known)."""
    if not platform.startswith("linux"):
        return PlatformCheck(ok=True)
    plugins = _requested(env)
    if plugins is None:
        return PlatformCheck(ok=True)
    if not plugins:
        return PlatformCheck(ok=False, no_display=True)
    first: PlatformCheck | None = None
    for plugin in plugins:
        text = ldd_outputs.get(plugin)
        if text is None:
            return PlatformCheck(ok=True, plugin=plugin, unknown_plugin=True)
        missing = missing_libraries(text)
        if missing:
            first = first or PlatformCheck(ok=False, plugin=plugin, missing=missing)
        elif (reachable or {}).get(plugin) is False:
            display = (f"WAYLAND_DISPLAY={env.get('WAYLAND_DISPLAY', '')}" if plugin == "wayland"
                       else f"DISPLAY={env.get('DISPLAY', '')}")
            first = first or PlatformCheck(ok=False, plugin=plugin, unreachable=display)
        else:
            return PlatformCheck(ok=True, plugin=plugin)
    assert first is not None
    return first


def plugin_path(plugin: str) -> Path | None:
    """PySide6's ``plugins/platforms/libq{plugin}.so``, found without importing Qt."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = Path(base) / "Qt" / "plugins" / "platforms" / f"libq{plugin}.so"
        if path.exists():
            return path
    return None


def probe_ldd(plugin: str, timeout_s: float = 15.0) -> str | None:
    """The ``ldd`` text of ``plugin``'s library (transitive, so libQt6XcbQpa's needs are in it).
    Without ``ldd``, a child process tries to load it and its error names the first missing library."""
    path = plugin_path(plugin)
    if path is None:
        return None
    try:
        done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=timeout_s, check=False)
        return done.stdout + done.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        _LOGGER.debug("ldd %s failed (%s); trying to load it", path, exc)
    try:
        done = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(path)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stderr


def _answers(address: str | tuple[str, int], timeout_s: float = 2.0) -> bool:
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(address)
        except OSError:
            return False
    return True


def display_answers(plugin: str, env: Mapping[str, str]) -> bool | None:
    """Whether the display server named in the environment accepts a connection (None: cannot
    tell). Qt aborts on "could not connect to display" as it does on a missing library."""
    if plugin == "wayland":
        name = env.get("WAYLAND_DISPLAY") or "wayland-0"
        runtime = env.get("XDG_RUNTIME_DIR", "")
        if not name.startswith("/") and not runtime:
            return None
        return _answers(name if name.startswith("/") else os.path.join(runtime, name))
    match = re.fullmatch(r"(?P<host>[^:]*):(?P<number>\d+)(?:\.\d+)?", env.get("DISPLAY", ""))
    if match is None or match["host"].startswith("/"):
        return None  # e.g. a launchd socket path: leave it to Qt
    number = int(match["number"])
    if match["host"] in ("", "unix"):
        socket_path = f"/tmp/.X11-unix/X{number}"
        return _answers("\0" + socket_path) or _answers(socket_path)  # Linux's abstract socket, then the file
    return _answers((match["host"], 6000 + number))


def check_this_machine(env: Mapping[str, str]) -> PlatformCheck:
    """``check_platform`` for the installed PySide6, this process's environment and its display."""
    if not sys.platform.startswith("linux"):
        return PlatformCheck(ok=True)
    plugins = _requested(env) or []
    return check_platform({plugin: probe_ldd(plugin) for plugin in plugins}, env, sys.platform,
                          {plugin: display_answers(plugin, env) for plugin in plugins})
