"""The Debian package: ``dist/mirbadllm_<version>_amd64.deb`` from the frozen program (``make package``).

The texts (control file, maintainer scripts, desktop entry) are pure functions asserted exactly in
tests; ``build_deb`` lays out the tree and calls ``dpkg-deb``. Layout:

- ``/opt/mirbadllm/``: the PyInstaller folder (the ``mirbadllm`` executable, its libraries, the
  portable llama.cpp runtime in ``_internal/runtimes/``);
- ``/usr/bin/mirbadllm``: a link to it;
- ``/usr/share/applications/mirbadllm.desktop`` and the icons in ``/usr/share/icons/hicolor``;
- ``/usr/lib/systemd/system/mirbadllm-agent.service`` (for a node: ``mirbadllm agent
  install-service`` enables it) and ``/usr/lib/systemd/user/mirbadllm-daemon.service``;
- the agent's upgrade path (``agent.upgrade.DebInstaller``): the oneshot unit
  ``mirbadllm-agent-upgrade.service``, run as root, whose helper ``/opt/mirbadllm/libexec/install-deb``
  installs ``/var/lib/mirbadllm-agent/upgrades/mirbadllm-agent-upgrade.deb`` (a regular file owned by
  the agent's user, of the package ``mirbadllm``) with apt, and the polkit rule
  ``/usr/share/polkit-1/rules.d/50-mirbadllm-agent-upgrade.rules`` that lets the agent's user start
  that unit and nothing else (polkit 0.106 or newer reads it; on older ones the start is refused
  and the node is upgraded by hand). An upgrade keeps the agent and its runtimes running; the
  agent restarts itself after its own, and a hand-run upgrade restarts the running agent
  (``KillMode=process``: its runtimes stay and are adopted).

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
    LINUX_DEB_UPGRADE_FILE,
    LINUX_UPGRADE_UNIT,
    AgentCommand,
    systemd_agent_unit,
    systemd_daemon_user_unit,
)

_LOGGER = logging.getLogger(__name__)

PACKAGE = "mirbadllm"
INSTALL_DIR = "/opt/mirbadllm"
EXECUTABLE = "/usr/bin/mirbadllm"
ICON_SIZES = (16, 32, 64, 256)
INSTALL_HELPER = f"{INSTALL_DIR}/libexec/install-deb"
POLKIT_RULE = "/usr/share/polkit-1/rules.d/50-mirbadllm-agent-upgrade.rules"
SELF_UPGRADE_ENV = "MIRBADLLM_AGENT_SELF_UPGRADE"  # set by the upgrade unit: the agent restarts itself

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


def install_helper_text(package_file: str = LINUX_DEB_UPGRADE_FILE, user: str = LINUX_AGENT_USER,
                        package: str = PACKAGE) -> str:
    """The root helper the upgrade unit runs with ``package_file``: it refuses any other path, a link,
    a file its agent's user does not own and a package other than ``package``; it installs a copy of
    its own (the agent cannot change it after the checks) with apt-get (dpkg -i without apt)."""
    folder = package_file.rsplit("/", 1)[0]
    return f"""#!/bin/sh
# MirbadLLM: installs the package the agent received and verified against the signed release feed.
# Run as root only by {LINUX_UPGRADE_UNIT}, which polkit lets {user} start.
set -eu
folder={folder}
user={user}
refuse() {{ echo "install-deb: refused: $*" >&2; exit 2; }}
[ "$#" -eq 1 ] || refuse "usage: install-deb $folder/NAME.deb"
path=$1
case "$path" in
    "$folder"/*.deb) ;;
    *) refuse "$path is not a .deb in $folder" ;;
esac
case "${{path#"$folder"/}}" in
    */*|.*) refuse "$path is not a file of $folder itself" ;;
esac
if [ ! -f "$path" ] || [ -L "$path" ]; then refuse "$path is not a regular file"; fi
if [ "$(stat -c %U -- "$path")" != "$user" ]; then refuse "$path is not owned by $user"; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -- "$path" "$work/package.deb"
if [ "$(dpkg-deb --field "$work/package.deb" Package)" != {package} ]; then
    refuse "$path is not the {package} package"
fi
export {SELF_UPGRADE_ENV}=1 DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null; then
    apt-get install -y --no-install-recommends "$work/package.deb"
else
    dpkg -i "$work/package.deb"
fi
"""


def upgrade_unit_text(helper: str = INSTALL_HELPER, package_file: str = LINUX_DEB_UPGRADE_FILE) -> str:
    """The oneshot system unit the agent starts (``systemctl start``) to install its upgrade as root."""
    return f"""[Unit]
Description=MirbadLLM agent upgrade: install the package the agent received
Documentation=https://github.com/mirbadllm/mirbadllm

[Service]
Type=oneshot
ExecStart={helper} {package_file}
TimeoutStartSec=15min
"""


def polkit_rule_text(user: str = LINUX_AGENT_USER, unit: str = LINUX_UPGRADE_UNIT) -> str:
    """Lets ``user`` start ``unit`` and nothing else (not stop, not restart, no other unit)."""
    return f"""// MirbadLLM: the agent's user ({user}) may start {unit}, which installs the
// upgrade package the agent verified; no other unit, no other verb.
polkit.addRule(function(action, subject) {{
    if (action.id == "org.freedesktop.systemd1.manage-units" && subject.user == "{user}" &&
            action.lookup("unit") == "{unit}" && action.lookup("verb") == "start") {{
        return polkit.Result.YES;
    }}
    return polkit.Result.NOT_HANDLED;
}});
"""


def postinst_text() -> str:
    """On an upgrade run by hand, restart the running agent so the new program runs (its runtimes
    stay: ``KillMode=process``); the agent's own upgrade (``MIRBADLLM_AGENT_SELF_UPGRADE``) restarts itself."""
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
    if [ -n "$2" ] && [ -z "${{{SELF_UPGRADE_ENV}:-}}" ] && [ -d /run/systemd/system ]; then
        systemctl try-restart {LINUX_AGENT_UNIT} || true
    fi
    if command -v update-desktop-database >/dev/null; then update-desktop-database -q || true; fi
    if command -v gtk-update-icon-cache >/dev/null; then gtk-update-icon-cache -q /usr/share/icons/hicolor || true; fi
fi
exit 0
"""


def prerm_text(install_dir: str = INSTALL_DIR) -> str:
    """On removal, stop and disable the agent's service and every process running from the
    package's files: the app, its daemon, agents and the llama-server runtimes they started, which
    would otherwise run on from deleted files. An upgrade stops nothing: the agent keeps serving
    (it may be the one installing it) and is restarted by postinst or by itself; its runtimes are
    adopted by the new program."""
    return f"""#!/bin/sh
set -e
if [ "$1" = "remove" ]; then
    if [ -d /run/systemd/system ] && systemctl is-active --quiet {LINUX_AGENT_UNIT}; then
        systemctl stop {LINUX_AGENT_UNIT} || true
    fi
    if [ -d /run/systemd/system ]; then systemctl disable {LINUX_AGENT_UNIT} >/dev/null 2>&1 || true; fi
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
           systemd_agent_unit(AgentCommand(EXECUTABLE, LINUX_AGENT_HOME, installed_by="deb")))
    _write(root / f"usr/lib/systemd/system/{LINUX_UPGRADE_UNIT}", upgrade_unit_text())
    _write(root / INSTALL_HELPER.lstrip("/"), install_helper_text(), 0o755)
    _write(root / POLKIT_RULE.lstrip("/"), polkit_rule_text())
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
