"""``mirbadllm agent install-service`` / ``uninstall-service`` / ``pairing-code``, per OS."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent import main as agent_main
from agent.service import install
from agent.service.install import (
    MakeDir,
    Plan,
    RemoveFile,
    Run,
    ServiceError,
    WriteFile,
)
from agent.service.units import AgentCommand, systemd_agent_unit
from daemon.pki import CertificateAuthority
from daemon.tls import ensure_client_certificate
from tests.fleet.inprocess import start_inprocess_agent


class FakeSystem:
    """Records what would be done; ``fail`` maps a command name to its exit code."""

    def __init__(self, platform: str, admin: bool = True, user: bool = False,
                 groups: Sequence[str] = ("video", "users"), fail: dict[str, int] | None = None) -> None:
        self.platform, self.admin, self.user, self._groups = platform, admin, user, list(groups)
        self.fail = fail or {}
        self.done: list[object] = []

    def is_admin(self) -> bool:
        return self.admin

    def user_exists(self, name: str) -> bool:
        return self.user

    def groups(self) -> list[str]:
        return self._groups

    def run(self, argv: Sequence[str]) -> int:
        self.done.append(tuple(argv))
        return self.fail.get(argv[0], 0)

    def write(self, path: str, content: bytes, mode: int) -> None:
        self.done.append(("write", path, mode))

    def copy(self, source: str, path: str, mode: int, owner: str | None) -> None:
        self.done.append(("copy", source, path, mode, owner))

    def remove(self, path: str) -> None:
        self.done.append(("remove", path))

    def make_dir(self, path: str, mode: int) -> None:
        self.done.append(("mkdir", path, mode))


def test_linux_install_creates_the_user_joins_gpu_groups_and_enables_the_unit() -> None:
    system = FakeSystem("linux", user=False, groups=["video", "render", "users"])
    plan = install.plan_for("install", system, "/usr/bin/mirbadllm")
    assert plan.steps == [
        Run(("useradd", "--system", "--user-group", "--home-dir", "/var/lib/mirbadllm-agent", "--no-create-home",
             "--shell", "/usr/sbin/nologin", "mirbadllm-agent")),
        Run(("usermod", "--append", "--groups", "video,render", "mirbadllm-agent")),
        WriteFile("/etc/systemd/system/mirbadllm-agent.service",
                  systemd_agent_unit(AgentCommand("/usr/bin/mirbadllm", "/var/lib/mirbadllm-agent")).encode()),
        Run(("systemctl", "daemon-reload")),
        Run(("systemctl", "enable", "--now", "mirbadllm-agent.service")),
    ]
    said: list[str] = []
    install.apply(plan, system, said.append)
    assert system.done[2] == ("write", "/etc/systemd/system/mirbadllm-agent.service", 0o644)
    assert "sudo /usr/bin/mirbadllm agent pairing-code" in said[1]


def test_an_existing_user_is_kept_and_a_program_in_a_home_gets_a_read_only_home() -> None:
    plan = install.plan_for("install", FakeSystem("linux", user=True, groups=[]), "/home/ada/venv/bin/mirbadllm")
    assert [type(s).__name__ for s in plan.steps] == ["WriteFile", "Run", "Run"]
    unit = plan.steps[0].content.decode()  # type: ignore[union-attr]
    assert "ProtectHome=read-only" in unit and "ProtectHome=yes" not in unit


def test_an_appimage_is_copied_into_the_service_folder_so_the_agent_can_replace_it_on_upgrade() -> None:
    system = FakeSystem("linux", user=True, groups=[])
    plan = install.plan_for("install", system, "/home/ada/Apps/MirbadLLM-0.1.0-x86_64.AppImage")
    install.apply(plan, system, lambda _line: None)
    assert system.done[:3] == [("mkdir", "/var/lib/mirbadllm-agent", 0o700),
                               ("chown", "mirbadllm-agent:mirbadllm-agent", "/var/lib/mirbadllm-agent"),
                               ("copy", "/home/ada/Apps/MirbadLLM-0.1.0-x86_64.AppImage",
                                "/var/lib/mirbadllm-agent/mirbadllm.AppImage", 0o755, "mirbadllm-agent")]
    unit = next(s for s in plan.steps if isinstance(s, WriteFile)).content.decode()
    assert ("ExecStart=/var/lib/mirbadllm-agent/mirbadllm.AppImage agent --home /var/lib/mirbadllm-agent "
            "--port 9443 --upgrade-target /var/lib/mirbadllm-agent/mirbadllm.AppImage") in unit
    assert "ProtectHome=yes" in unit  # the copy does not live in a home


def test_linux_uninstall_stops_disables_and_removes_the_unit_but_keeps_the_identity() -> None:
    plan = install.plan_for("uninstall", FakeSystem("linux"), "/usr/bin/mirbadllm")
    assert plan.steps == [Run(("systemctl", "disable", "--now", "mirbadllm-agent.service"), ok_codes=(0, 1, 5)),
                          RemoveFile("/etc/systemd/system/mirbadllm-agent.service"),
                          Run(("systemctl", "daemon-reload"))]
    assert "stay in /var/lib/mirbadllm-agent" in plan.then[0]


def test_macos_install_bootstraps_the_launch_daemon() -> None:
    plan = install.plan_for("install", FakeSystem("darwin"), "/Applications/MirbadLLM.app/Contents/MacOS/mirbadllm")
    kinds = [(type(s).__name__, getattr(s, "path", None) or getattr(s, "argv", None)) for s in plan.steps]
    assert kinds == [("MakeDir", "/Library/Application Support/MirbadLLM/agent"),
                     ("MakeDir", "/Library/Logs/MirbadLLM"),
                     ("WriteFile", "/Library/LaunchDaemons/com.mirbadllm.agent.plist"),
                     ("Run", ("launchctl", "bootout", "system/com.mirbadllm.agent")),
                     ("Run", ("launchctl", "bootstrap", "system", "/Library/LaunchDaemons/com.mirbadllm.agent.plist"))]


def test_windows_install_grants_the_virtual_account_its_folder_before_starting() -> None:
    plan = install.plan_for("install", FakeSystem("win32"), r"C:\Program Files\MirbadLLM\mirbadllm.exe")
    argvs = [s.argv for s in plan.steps if isinstance(s, Run)]
    assert [a[:2] for a in argvs] == [("sc.exe", "create"), ("icacls", r"C:\ProgramData\MirbadLLM\agent"),
                                      ("sc.exe", "description"), ("sc.exe", "failure"),
                                      ("sc.exe", "failureflag"), ("sc.exe", "start")]
    assert r"NT SERVICE\MirbadLLMAgent:(OI)(CI)F" in argvs[1]
    assert isinstance(plan.steps[0], MakeDir)
    assert "pairing-code" in plan.then[1] and "sudo" not in plan.then[1]


def test_without_admin_rights_nothing_is_done_and_the_error_says_how() -> None:
    system = FakeSystem("linux", admin=False)
    with pytest.raises(ServiceError, match="run it again with sudo"):
        install.apply(install.plan_for("install", system, "/usr/bin/mirbadllm"), system)
    assert system.done == []


def test_a_failing_command_stops_the_plan_and_names_it() -> None:
    system = FakeSystem("linux", fail={"systemctl": 1})
    with pytest.raises(ServiceError, match="`systemctl daemon-reload` failed with exit code 1"):
        install.apply(install.plan_for("install", system, "/usr/bin/mirbadllm"), system)
    assert ("systemctl", "enable", "--now", "mirbadllm-agent.service") not in system.done


def test_an_unknown_os_is_refused() -> None:
    with pytest.raises(ServiceError, match="no service manager"):
        install.plan_for("install", FakeSystem("sunos5"), "/x")
    assert isinstance(Plan([]), Plan)


async def test_pairing_code_prints_the_code_an_unpaired_agent_shows_and_forgets_it_once_paired(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    agent = await start_inprocess_agent(tmp_path / "agent", name="svc")
    try:
        pairing = await agent.wait_event("pairing")
        code_file = tmp_path / "agent" / "pairing-code.json"
        assert stat.S_IMODE(os.stat(code_file).st_mode) == 0o600
        assert agent_main.main(["pairing-code", "--home", str(tmp_path / "agent")]) == 0
        out = capsys.readouterr().out
        assert f"Pairing code:  {pairing['code']}" in out and 'agent "svc"' in out

        ca = CertificateAuthority.load_or_create(tmp_path / "pki")
        _key, cert = ensure_client_certificate(ca, tmp_path / "pki")
        await agent.pair_with(ca, cert.read_text())
        assert not code_file.exists()
        assert agent_main.main(["pairing-code", "--home", str(tmp_path / "agent")]) == 0
        assert "is paired already" in capsys.readouterr().out
    finally:
        await agent.close()


def test_pairing_code_with_no_agent_waiting_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert agent_main.main(["pairing-code", "--home", str(tmp_path / "nobody")]) == 1
    assert "No agent is waiting to be paired" in capsys.readouterr().err
