"""``make system-deps``: the system packages some tests need and pip cannot install, on Debian/Ubuntu.

- ``docker.io``: the vLLM container driver's tests run against a real Docker engine (the tests start
  ``dockerd`` themselves when none runs);
- the AppImage build tools (``installers.appimage.BUILD_PACKAGES``): the FUSE-free AppImage runtime
  is compiled and an AppImage is built and run in the tests.

Without them those tests skip and say why. This needs root and apt; it installs only what is
missing, and does nothing elsewhere (it says what to install instead).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from installers.appimage import BUILD_PACKAGES

PACKAGES = ("docker.io", *BUILD_PACKAGES)


def missing(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """The packages dpkg does not list as installed."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Status}\\n", *packages],
                         capture_output=True, text=True, check=False).stdout
    installed = {line.split()[0] for line in out.splitlines() if line.endswith("install ok installed")}
    return [p for p in packages if p not in installed]


def main() -> int:
    wanted = missing()
    if not wanted:
        print("system packages: all present")
        return 0
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"system packages missing: {' '.join(wanted)}; the tests that need them skip. On Debian/Ubuntu: "
              f"sudo apt-get install {' '.join(wanted)}")
        return 0
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing: {' '.join(wanted)}", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *wanted], check=False, env=env)
    if done.returncode != 0:
        print("some system packages could not be installed; the tests that need them skip", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
