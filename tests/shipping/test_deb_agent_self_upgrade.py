"""The .deb's agent upgrade, installed for real: the package's own root helper installs a newer
package left in the agent's upgrades folder (with apt, through the real maintainer scripts), a
runtime running from the package's folder lives through it, and a purge then stops it and leaves
nothing. Runs where a .deb was built (``make test-package``, or ``MIRBADLLM_TEST_DEB``) as root.

What does not run here: systemd and polkit (``systemctl start mirbadllm-agent-upgrade.service`` from
the agent's sandboxed unit, the rule's grant); the helper is started directly, as that unit would.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.service.units import (
    LINUX_AGENT_HOME,
    LINUX_AGENT_USER,
    LINUX_DEB_UPGRADE_FILE,
)
from installers.linux_deb import INSTALL_DIR, INSTALL_HELPER, POLKIT_RULE
from tests.shipping.test_deb_install import _deb

pytestmark = pytest.mark.slow
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def _version() -> str:
    """The installed version of mirbadllm ("" unless installed: removed, config files left, is not)."""
    said = subprocess.run(["dpkg-query", "-W", "-f=${Status} ${Version}", "mirbadllm"], capture_output=True,
                          text=True, check=False).stdout
    return said.removeprefix("install ok installed ") if said.startswith("install ok installed ") else ""


def _next_version(deb: Path, work: Path) -> tuple[Path, str]:
    """The same package with a higher version: what a release's linux-x86_64-deb is to the installed one."""
    tree = work / "tree"
    subprocess.run(["dpkg-deb", "-R", str(deb), str(tree)], check=True)
    control = tree / "DEBIAN" / "control"
    lines = control.read_text().splitlines()
    old = next(line for line in lines if line.startswith("Version: ")).split(": ", 1)[1]
    new = f"{old}+upgrade1"
    control.write_text("\n".join(f"Version: {new}" if line.startswith("Version: ") else line for line in lines) + "\n")
    out = work / f"mirbadllm_{new}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "-b", str(tree), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out, new


@pytest.fixture(scope="module")
def installed() -> Iterator[Path]:
    deb = _deb()
    if deb is None or not deb.is_file():
        pytest.skip("no .deb built (make package)")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("installing a .deb needs root and apt")
    if _version():
        pytest.skip("mirbadllm is installed on this machine already; not touching it")
    subprocess.run(["apt-get", "install", "-y", "-q", str(deb.absolute())], check=True, env=APT_ENV,
                   stdout=subprocess.DEVNULL)
    try:
        yield deb
    finally:
        subprocess.run(["apt-get", "purge", "-y", "-q", "mirbadllm"], check=False, env=APT_ENV,
                       stdout=subprocess.DEVNULL)


def test_the_packaged_helper_upgrades_the_package_and_the_runtimes_live_through_it(
        installed: Path, tmp_path: Path) -> None:
    assert (Path(POLKIT_RULE).is_file() and os.access(INSTALL_HELPER, os.X_OK))
    unit = Path("/usr/lib/systemd/system/mirbadllm-agent.service").read_text()
    assert "--installed-by deb" in unit
    runtime = Path(INSTALL_DIR) / "test-runtime"  # a stand-in runtime running from the package's folder
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", runtime)
    proc = subprocess.Popen([str(runtime), "300"], start_new_session=True)
    try:
        newer, version = _next_version(installed, tmp_path)
        package = Path(LINUX_DEB_UPGRADE_FILE)
        package.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(newer, package)
        # Left by root, not by the agent: refused, nothing installed.
        refused = subprocess.run([INSTALL_HELPER, str(package)], capture_output=True, text=True, check=False)
        assert refused.returncode == 2 and f"is not owned by {LINUX_AGENT_USER}" in refused.stderr
        shutil.chown(package, LINUX_AGENT_USER, LINUX_AGENT_USER)
        done = subprocess.run([INSTALL_HELPER, str(package)], capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert _version() == version
        assert proc.poll() is None  # the upgrade stopped nothing; the new agent adopts it
        # Removal stops what runs from the package's files and purge takes the agent's state and user.
        subprocess.run(["apt-get", "purge", "-y", "-q", "mirbadllm"], check=True, env=APT_ENV,
                       stdout=subprocess.DEVNULL)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert not Path(LINUX_AGENT_HOME).exists() and not Path(INSTALL_HELPER).exists()
        assert subprocess.run(["getent", "passwd", LINUX_AGENT_USER], check=False).returncode != 0
    finally:
        proc.kill()
        proc.wait()
        runtime.unlink(missing_ok=True)
        if Path(INSTALL_DIR).is_dir() and not any(Path(INSTALL_DIR).iterdir()):
            Path(INSTALL_DIR).rmdir()
