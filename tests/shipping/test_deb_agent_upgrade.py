"""The .deb's agent upgrade path, as shipped: the polkit rule, the oneshot unit, and the root helper
run for real against a fake apt-get and dpkg-deb (it refuses every file but the one it is for)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.service.install import WriteFile, linux_install_plan
from installers import linux_deb

ROOT = Path(__file__).resolve().parents[2]
ME = pwd.getpwuid(os.getuid()).pw_name


def test_the_polkit_rule_lets_only_the_agent_user_start_only_the_upgrade_unit(tmp_path: Path) -> None:
    rule = linux_deb.polkit_rule_text()
    assert rule == """// MirbadLLM: the agent's user (mirbadllm-agent) may start mirbadllm-agent-upgrade.service, which installs the
// upgrade package the agent verified; no other unit, no other verb.
polkit.addRule(function(action, subject) {
    if (action.id == "org.freedesktop.systemd1.manage-units" && subject.user == "mirbadllm-agent" &&
            action.lookup("unit") == "mirbadllm-agent-upgrade.service" && action.lookup("verb") == "start") {
        return polkit.Result.YES;
    }
    return polkit.Result.NOT_HANDLED;
});
"""
    if shutil.which("node"):  # polkit rules are JavaScript: at least it parses
        (tmp_path / "rule.js").write_text(rule)
        subprocess.run(["node", "--check", str(tmp_path / "rule.js")], check=True)


def test_the_upgrade_unit_runs_the_helper_on_the_one_fixed_file() -> None:
    assert linux_deb.upgrade_unit_text() == (
        "[Unit]\nDescription=MirbadLLM agent upgrade: install the package the agent received\n"
        "Documentation=https://github.com/mirbadllm/mirbadllm\n\n[Service]\nType=oneshot\n"
        "ExecStart=/opt/mirbadllm/libexec/install-deb /var/lib/mirbadllm-agent/upgrades/mirbadllm-agent-upgrade.deb\n"
        "TimeoutStartSec=15min\n")


def test_the_packaged_agent_unit_says_how_it_was_installed_and_install_service_keeps_it() -> None:
    frozen = "/opt/mirbadllm/mirbadllm"
    unit = next(s for s in linux_install_plan(frozen, True, []).steps if isinstance(s, WriteFile))
    exec_start = "ExecStart=/opt/mirbadllm/mirbadllm agent --home /var/lib/mirbadllm-agent --port 9443 --installed-by deb"
    assert exec_start in unit.content.decode()
    source = linux_install_plan("/srv/venv/bin/mirbadllm", True, []).steps
    assert not any("--installed-by" in s.content.decode() for s in source if isinstance(s, WriteFile))


def test_the_package_ships_the_helper_the_unit_and_the_rule(tmp_path: Path) -> None:
    frozen = tmp_path / "frozen"
    (frozen / "_internal").mkdir(parents=True)
    (frozen / "mirbadllm").write_text("#!/bin/sh\n")
    root = linux_deb.lay_out(frozen, ROOT / "resources", tmp_path / "root", "0.2.0", "amd64")
    assert (root / "opt/mirbadllm/libexec/install-deb").stat().st_mode & 0o777 == 0o755
    assert (root / "usr/lib/systemd/system/mirbadllm-agent-upgrade.service").read_text() == \
        linux_deb.upgrade_unit_text()
    assert (root / "usr/share/polkit-1/rules.d/50-mirbadllm-agent-upgrade.rules").read_text() == \
        linux_deb.polkit_rule_text()
    assert "--installed-by deb" in (root / "usr/lib/systemd/system/mirbadllm-agent.service").read_text()


def test_an_upgrade_keeps_the_agent_running_and_only_a_hand_run_one_restarts_it() -> None:
    prerm, postinst = linux_deb.prerm_text(), linux_deb.postinst_text()
    assert prerm.index('if [ "$1" = "remove" ]; then') < prerm.index("systemctl stop mirbadllm-agent.service")
    assert prerm.index('if [ "$1" = "remove" ]; then') < prerm.index("systemctl disable mirbadllm-agent.service")
    assert ('    if [ -n "$2" ] && [ -z "${MIRBADLLM_AGENT_SELF_UPGRADE:-}" ] && [ -d /run/systemd/system ]; then\n'
            "        systemctl try-restart mirbadllm-agent.service || true\n") in postinst


class Helper:
    """The helper rendered for a folder under tmp_path and this user, with apt-get and dpkg-deb faked."""

    def __init__(self, tmp_path: Path, user: str = ME) -> None:
        self.folder = tmp_path / "upgrades"
        self.folder.mkdir()
        self.package = self.folder / "mirbadllm-agent-upgrade.deb"
        self.log = tmp_path / "apt.log"
        bin_ = tmp_path / "bin"
        bin_.mkdir()
        (bin_ / "dpkg-deb").write_text('#!/bin/sh\nsed -n "s/^Package: //p" "$2"\n')
        (bin_ / "apt-get").write_text(f'#!/bin/sh\necho "$MIRBADLLM_AGENT_SELF_UPGRADE $*" > {self.log}\n'
                                      f'cat "$4" >> {self.log}\n')
        for tool in bin_.iterdir():
            tool.chmod(0o755)
        self.script = tmp_path / "install-deb"
        self.script.write_text(linux_deb.install_helper_text(str(self.package), user))
        self.script.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}

    def run(self, path: Path | str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.script), str(path)], env=self.env, capture_output=True, text=True,
                              timeout=30, check=False)


def test_the_helper_installs_a_copy_of_the_package_with_apt(tmp_path: Path) -> None:
    helper = Helper(tmp_path)
    helper.package.write_text("Package: mirbadllm\nVersion: 0.2.0\n")
    done = helper.run(helper.package)
    assert done.returncode == 0, done.stderr
    said, copied = helper.log.read_text().split("\n", 1)
    argv = said.split(" ")
    assert argv[:5] == ["1", "install", "-y", "--no-install-recommends", argv[4]]
    assert argv[4].endswith("/package.deb") and not argv[4].startswith(str(helper.folder))
    assert copied == "Package: mirbadllm\nVersion: 0.2.0\n"
    assert not Path(argv[4]).exists()  # its copy is cleaned up


@pytest.mark.parametrize(("path", "why"), [
    ("/etc/shadow", "is not a .deb in"),
    ("{folder}/../evil.deb", "is not a file of"),
    ("{folder}/sub/x.deb", "is not a file of"),
    ("{folder}/.partial.deb", "is not a file of"),
    ("{folder}/link.deb", "is not a regular file"),
    ("{folder}/other.deb", "is not the mirbadllm package"),
])
def test_the_helper_refuses_anything_else(tmp_path: Path, path: str, why: str) -> None:
    helper = Helper(tmp_path)
    (tmp_path / "evil.deb").write_text("Package: mirbadllm\n")
    (helper.folder / "sub").mkdir()
    (helper.folder / "sub" / "x.deb").write_text("Package: mirbadllm\n")
    (helper.folder / ".partial.deb").write_text("Package: mirbadllm\n")
    (helper.folder / "link.deb").symlink_to(tmp_path / "evil.deb")
    (helper.folder / "other.deb").write_text("Package: openssh-server\n")
    done = helper.run(path.format(folder=helper.folder))
    assert done.returncode == 2 and why in done.stderr and "install-deb: refused:" in done.stderr
    assert not helper.log.exists()  # apt-get never ran


def test_the_helper_refuses_a_file_its_agent_user_does_not_own(tmp_path: Path) -> None:
    other = "nobody" if ME != "nobody" else "root"
    helper = Helper(tmp_path, user=other)
    helper.package.write_text("Package: mirbadllm\n")
    done = helper.run(helper.package)
    assert done.returncode == 2 and f"is not owned by {other}" in done.stderr and not helper.log.exists()
