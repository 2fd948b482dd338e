"""The Debian package: ``dist/mirbadllm_<version>_amd64.deb`` from the frozen program (``make package``).

The texts (control file, maintainer scripts, desktop entry) are pure functions asserted exactly in
tests; ``build_deb`` lays out the tree and calls ``dpkg-deb``. Layout:

- ``/opt/mirbadllm/``: the PyInstaller folder (the ``mirbadllm`` executable, its libraries, the
  portable llama.cpp runtime in ``_internal/runtimes/``);
- ``/usr/bin/mirbadllm``: a link to it;
- ``/usr/share/applications/mirbadllm.desktop`` and the icons in ``/usr/share/icons/hicolor``;
- ``/usr/lib/systemd/system/mirbadllm-agent.service`` (for a node: ``mirbadllm agent
  install-service`` enables it) and ``/usr/lib/systemd/user/mirbadllm-daemon.service``.

Nothing is enabled at install: the app starts the daemon, which runs this machine's agent as its
child. Removing the package removes all of it; purging also removes the service's state and user.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from agent.service.units import (
    LINUX_AGENT_HOME,
    LINUX_AGENT_UNIT,
    LINUX_AGENT_USER,
    LINUX_DAEMON_UNIT,
    AgentCommand,
    systemd_agent_unit,
    systemd_daemon_user_unit,
)

_LOGGER = logging.getLogger(__name__)

PACKAGE = "mirbadllm"
INSTALL_DIR = "/opt/mirbadllm"
EXECUTABLE = "/usr/bin/mirbadllm"
ICON_SIZES = (16, 32, 64, 256)

# What Qt's xcb platform plugin, OpenGL, fonts, D-Bus (the tray) and llama.cpp's OpenMP need from
# the system: PyInstaller bundles Qt itself but not these.
DEPENDS = (
    "libc6 (>= 2.31)", "libgomp1", "libglib2.0-0", "libdbus-1-3", "libfontconfig1", "libfreetype6",
    "libegl1", "libgl1", "libxkbcommon0", "libxkbcommon-x11-0", "libx11-xcb1", "libxcb1", "libxcb-cursor0",
    "libxcb-icccm4", "libxcb-image0", "libxcb-keysyms1", "libxcb-randr0", "libxcb-render-util0",
    "libxcb-shape0", "libxcb-xfixes0", "libxcb-xinerama0", "libxcb-xkb1",
)
# libvulkan1: the Vulkan loader the bundled llama.cpp's Vulkan module links; every GPU vendor's Linux
# driver brings its own Vulkan driver. Without it the module does not load and models run on the CPU.
RECOMMENDS = ("ca-certificates", "libvulkan1")


def deb_architecture(machine: str) -> str:
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[machine.lower()]


def deb_file_name(version: str, arch: str = "amd64") -> str:
    return f"{PACKAGE}_{version}_{arch}.deb"


def control_text(version: str, arch: str, installed_size_kib: int) -> str:
    return (f"Package: {PACKAGE}\n"
            f"Version: {version}\n"
            f"Architecture: {arch}\n"
            "Maintainer: MirbadLLM <team@mirbadllm.dev>\n"
            f"Installed-Size: {installed_size_kib}\n"
            f"Depends: {', '.join(DEPENDS)}\n"
            f"Recommends: {', '.join(RECOMMENDS)}\n"
            "Section: utils\n"
            "Priority: optional\n"
            "Homepage: https://github.com/mirbadllm/mirbadllm\n"
            "Description: run local language models on the machines you own\n"
            " MirbadLLM serves local models (llama.cpp) from this machine and the others on your LAN\n"
            " behind one OpenAI-compatible endpoint, managed from a desktop app and a tray icon.\n")


def desktop_entry() -> str:
    return ("[Desktop Entry]\n"
            "Type=Application\n"
            "Name=MirbadLLM\n"
            "GenericName=Local language models\n"
            "Comment=Run local language models behind one OpenAI-compatible endpoint\n"
            f"Exec={EXECUTABLE}\n"
            "Icon=mirbadllm\n"
            "Terminal=false\n"
            "Categories=Development;Utility;\n"
            "StartupWMClass=mirbadllm\n")


def postinst_text() -> str:
    return f"""#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
    if ! getent passwd {LINUX_AGENT_USER} >/dev/null; then
        adduser --system --group --home {LINUX_AGENT_HOME} --no-create-home --quiet {LINUX_AGENT_USER}
    fi
    for group in video render; do
        if getent group "$group" >/dev/null; then adduser --quiet {LINUX_AGENT_USER} "$group"; fi
    done
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
    if command -v update-desktop-database >/dev/null; then update-desktop-database -q || true; fi
    if command -v gtk-update-icon-cache >/dev/null; then gtk-update-icon-cache -q /usr/share/icons/hicolor || true; fi
fi
exit 0
"""


def prerm_text(install_dir: str = INSTALL_DIR) -> str:
    """Stop the agent's service; on removal (not on an upgrade, whose new files adopt what runs) also
    every process running from the package's files: the app, its daemon, agents and the llama-server
    runtimes they started, which would otherwise run on from deleted files."""
    return f"""#!/bin/sh
set -e
if [ -d /run/systemd/system ] && systemctl is-active --quiet {LINUX_AGENT_UNIT}; then
    systemctl stop {LINUX_AGENT_UNIT} || true
fi
if [ -d /run/systemd/system ]; then systemctl disable {LINUX_AGENT_UNIT} >/dev/null 2>&1 || true; fi
if [ "$1" = "remove" ]; then
    ours() {{
        for link in /proc/[0-9]*/exe; do
            case "$(readlink "$link" 2>/dev/null)" in
                {install_dir}/*) pid=${{link#/proc/}}; echo "${{pid%/exe}}" ;;
            esac
        done
    }}
    pids=$(ours)
    if [ -n "$pids" ]; then
        kill -TERM $pids 2>/dev/null || true
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            [ -z "$(ours)" ] && break
            sleep 0.5
        done
        pids=$(ours)
        if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
    fi
fi
exit 0
"""


def postrm_text() -> str:
    return f"""#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
if [ "$1" = "purge" ]; then
    rm -rf {LINUX_AGENT_HOME}
    if getent passwd {LINUX_AGENT_USER} >/dev/null; then deluser --quiet --system {LINUX_AGENT_USER} || true; fi
fi
exit 0
"""


def _tree_size_kib(root: Path) -> int:
    total = sum(p.lstat().st_size for p in root.rglob("*") if p.is_file() or p.is_symlink())
    return max(1, (total + 1023) // 1024)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def lay_out(frozen_dir: Path, resources: Path, root: Path, version: str, arch: str) -> Path:
    """The package's file tree under ``root`` (made fresh), ready for ``dpkg-deb --build``."""
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(frozen_dir, root / INSTALL_DIR.lstrip("/"), symlinks=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / EXECUTABLE.lstrip("/")).symlink_to(f"{INSTALL_DIR}/mirbadllm")
    _write(root / "usr/share/applications/mirbadllm.desktop", desktop_entry())
    for size in ICON_SIZES:
        target = root / f"usr/share/icons/hicolor/{size}x{size}/apps/mirbadllm.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(resources / "icons" / "png" / f"app-{size}.png", target)
    svg = root / "usr/share/icons/hicolor/scalable/apps/mirbadllm.svg"
    svg.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(resources / "icons" / "app.svg", svg)
    _write(root / f"usr/lib/systemd/system/{LINUX_AGENT_UNIT}",
           systemd_agent_unit(AgentCommand(EXECUTABLE, LINUX_AGENT_HOME)))
    _write(root / f"usr/lib/systemd/user/{LINUX_DAEMON_UNIT}", systemd_daemon_user_unit(EXECUTABLE))
    _write(root / "usr/share/doc/mirbadllm/copyright",
           "MirbadLLM is licensed under the Apache License 2.0.\n"
           "The bundled llama.cpp runtime is MIT-licensed (https://github.com/ggml-org/llama.cpp).\n"
           "Qt for Python (PySide6) is licensed under the LGPLv3.\n")
    size = _tree_size_kib(root)
    debian = root / "DEBIAN"
    _write(debian / "control", control_text(version, arch, size))
    _write(debian / "postinst", postinst_text(), 0o755)
    _write(debian / "prerm", prerm_text(), 0o755)
    _write(debian / "postrm", postrm_text(), 0o755)
    return root


def build_deb(frozen_dir: Path, resources: Path, out_dir: Path, version: str, machine: str,
              work: Path, dpkg_deb: Sequence[str] = ("dpkg-deb",)) -> Path:
    arch = deb_architecture(machine)
    root = lay_out(frozen_dir, resources, work / "deb-root", version, arch)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / deb_file_name(version, arch)
    env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "0")}
    subprocess.run([*dpkg_deb, "--root-owner-group", "-Zxz", "--build", str(root), str(target)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    _LOGGER.info("built %s", target)
    return target
