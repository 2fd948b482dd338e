"""``make system-deps``: the system packages some tests need and pip cannot install, on Debian/Ubuntu.

- ``docker.io``: the vLLM container driver's tests run against a real Docker engine (the tests start
  ``dockerd`` themselves when none runs);
- the AppImage build tools (``installers.appimage.BUILD_PACKAGES``): the FUSE-free AppImage runtime
  is compiled and an AppImage is built and run in the tests;
- the Vulkan build of llama.cpp (``VULKAN_BUILD_PACKAGES``: the loader's headers, the GLSL compiler,
  the SPIR-V headers) and a Vulkan device to run it on with no GPU: Mesa's ``lavapipe``
  (``mesa-vulkan-drivers``). Debian 12's Mesa 22.3 lavapipe crashes at llama.cpp's first
  computation; Mesa 25 from ``bookworm-backports`` runs it, so on bookworm that source is added and
  Mesa is taken from it;
- ``shellcheck``: the release workflow's shell steps are linted (``tests/shipping/test_workflow_lint.py``).

Without them those tests skip and say why (the Vulkan ones fail under ``make test``, which needs them).
This needs root and apt; it installs only what is missing, and does nothing elsewhere (it says what
to install instead).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from installers.appimage import BUILD_PACKAGES

VULKAN_BUILD_PACKAGES = ("libvulkan-dev", "glslc", "spirv-headers")
VULKAN_RUN_PACKAGES = ("mesa-vulkan-drivers", "vulkan-tools")
PACKAGES = ("docker.io", "ninja-build", "shellcheck", *BUILD_PACKAGES, *VULKAN_BUILD_PACKAGES, *VULKAN_RUN_PACKAGES)
# The oldest Mesa whose lavapipe runs ggml-vulkan (22.3 crashes; 25.0 was checked).
MESA_MIN_MAJOR = 24
BACKPORTS_FILE = Path("/etc/apt/sources.list.d/mirbadllm-bookworm-backports.sources")
BACKPORTS_SOURCE = """Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def missing(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """The packages dpkg does not list as installed."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Status}\\n", *packages],
                         capture_output=True, text=True, check=False).stdout
    installed = {line.split()[0] for line in out.splitlines() if line.endswith("install ok installed")}
    return [p for p in packages if p not in installed]


def installed_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def mesa_major(version: str | None) -> int:
    """``25.0.7-2~bpo12+1`` -> 25; 0 when unknown."""
    try:
        return int((version or "").split(":")[-1].split(".")[0])
    except ValueError:
        return 0


def os_codename(os_release: Path = Path("/etc/os-release")) -> str:
    try:
        for line in os_release.read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return ""


def main() -> int:
    wanted = missing()
    mesa_too_old = mesa_major(installed_version("mesa-vulkan-drivers")) < MESA_MIN_MAJOR
    bookworm = os_codename() == "bookworm"
    if not wanted and not mesa_too_old:
        print("system packages: all present")
        return 0
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"system packages missing: {' '.join(wanted) or '-'}"
              f"{f'; Mesa {MESA_MIN_MAJOR} or newer (mesa-vulkan-drivers)' if mesa_too_old else ''}; the tests "
              f"that need them skip. On Debian/Ubuntu: sudo apt-get install {' '.join(wanted)}")
        return 0
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if bookworm and mesa_too_old and not BACKPORTS_FILE.exists():
        print(f"adding bookworm-backports ({BACKPORTS_FILE}) for Mesa {MESA_MIN_MAJOR}+", flush=True)
        BACKPORTS_FILE.write_text(BACKPORTS_SOURCE)
    print(f"installing: {' '.join(wanted) or 'a newer Mesa'}", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    others = [p for p in wanted if p not in VULKAN_RUN_PACKAGES]
    ok = True
    if others:
        ok &= subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *others],
                             check=False, env=env).returncode == 0
    if mesa_too_old or any(p in wanted for p in VULKAN_RUN_PACKAGES):
        release = ["-t", "bookworm-backports"] if bookworm else []
        ok &= subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *release,
                              *VULKAN_RUN_PACKAGES], check=False, env=env).returncode == 0
    if not ok:
        print("some system packages could not be installed; the tests that need them skip", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
