"""The single-file agent build the daemon's rollouts push: its spec, its name, the feed that lists it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.releases.feed import PLATFORMS
from installers import agent_build, package
from tests.shipping.spec_analysis import analysed, named_paths

ROOT = Path(__file__).resolve().parents[2]


def test_the_agent_spec_makes_one_file_with_the_agent_only_on_every_os(monkeypatch: pytest.MonkeyPatch) -> None:
    for platform in ("linux", "win32", "darwin"):
        made = analysed(platform, monkeypatch, "agent.spec")
        assert all(Path(p).exists() for p in named_paths(made)), platform
        analysis = next(m for m in made if m.kind == "Analysis")
        [exe] = [m for m in made if m.kind == "EXE"]
        assert exe.name == "mirbadllm-agent" and exe.kwargs["console"] is True
        # one file: the EXE carries the binaries and the data itself, and nothing is collected beside it
        assert any(arg is analysis.binaries for arg in exe.args) and any(arg is analysis.datas for arg in exe.args)
        assert not [m for m in made if m.kind in ("COLLECT", "BUNDLE")]
        hidden, excluded = analysis.kwargs["hiddenimports"], analysis.kwargs["excludes"]
        assert {"agent", "core"} <= set(hidden) and not {"app", "daemon"} & set(hidden)  # type: ignore[arg-type]
        assert {"app", "daemon", "PySide6"} <= set(excluded)  # type: ignore[arg-type]
        assert ("servicemanager" in hidden) == (platform == "win32")  # type: ignore[operator]


def test_the_entry_runs_the_agent_command_line() -> None:
    entry = ROOT / "installers" / "pyinstaller" / "agent_entry.py"
    shown = subprocess.run([sys.executable, str(entry), "--help"], capture_output=True, text=True, cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    assert "--upgrade-target" in shown.stdout  # the agent's own options, not the launcher's usage


def test_each_build_is_named_after_its_feed_platform() -> None:
    assert agent_build.this_platform("Linux", "x86_64") == "agent-linux-x86_64"
    assert agent_build.this_platform("Windows", "AMD64") == "agent-windows-x86_64"
    assert agent_build.this_platform("Darwin", "arm64") == "agent-macos-arm64"
    with pytest.raises(ValueError, match="no agent build for Linux riscv64"):
        agent_build.this_platform("Linux", "riscv64")
    assert agent_build.file_name("0.2.0", "agent-linux-x86_64") == "mirbadllm-agent-0.2.0-linux-x86_64"
    assert agent_build.file_name("0.2.0", "agent-windows-x86_64") == "mirbadllm-agent-0.2.0-windows-x86_64.exe"
    assert {"agent-linux-x86_64", "agent-windows-x86_64", "agent-macos-arm64"} <= set(PLATFORMS)


def test_the_build_freezes_the_agent_spec_and_moves_it_into_dist(tmp_path: Path) -> None:
    ran: list[list[str]] = []

    def pyinstaller(argv: list[str], _env: dict[str, str]) -> None:
        ran.append(argv)
        out = Path(argv[argv.index("--distpath") + 1])
        out.mkdir(parents=True)
        (out / "mirbadllm-agent").write_bytes(b"\x7fELF agent")

    key, path = agent_build.build(tmp_path / "dist", tmp_path / "work", "0.2.0", "agent-linux-x86_64", pyinstaller)
    assert [a for a in ran[0] if a.endswith(".spec")] == [str(ROOT / "installers" / "pyinstaller" / "agent.spec")]
    assert (key, path) == ("agent-linux-x86_64", tmp_path / "dist" / "mirbadllm-agent-0.2.0-linux-x86_64")
    assert path.read_bytes() == b"\x7fELF agent"
    with pytest.raises(FileNotFoundError, match="no mirbadllm-agent"):
        agent_build.build(tmp_path / "dist", tmp_path / "work2", "0.2.0", "agent-linux-x86_64", lambda _a, _e: None)


def test_make_package_lists_the_agent_build_in_the_feed_and_the_sums(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def made(name: str, data: bytes) -> Path:
        path = tmp_path / "dist" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    frozen = tmp_path / "work" / "frozen" / "mirbadllm"
    frozen.mkdir(parents=True)
    (frozen / "mirbadllm").write_bytes(b"")
    monkeypatch.setattr(package.linux_deb, "build_deb", lambda *_a: made("mirbadllm_0.2.0_amd64.deb", b"deb"))
    monkeypatch.setattr(package.appimage, "build_appimage", lambda *_a: made("MirbadLLM.AppImage", b"image"))
    monkeypatch.setattr(package.agent_build, "build", lambda *_a: (
        "agent-linux-x86_64", made("mirbadllm-agent-0.2.0-linux-x86_64", b"agent")))
    monkeypatch.setattr(package, "product_version", lambda: "0.2.0")
    monkeypatch.delenv(package.SIGNING_KEY_ENV, raising=False)
    assert package.main(["--dist", str(tmp_path / "dist"), "--work", str(tmp_path / "work"), "--skip-freeze"]) == 0
    feed = json.loads((tmp_path / "dist" / "feed.json").read_text())
    listed = {a["platform"]: a["url"] for a in feed["artefacts"]}
    assert listed["agent-linux-x86_64"] == "mirbadllm-agent-0.2.0-linux-x86_64"
    assert set(listed) == {"linux-x86_64-deb", "linux-x86_64-appimage", "agent-linux-x86_64"}
    sums = (tmp_path / "dist" / "SHA256SUMS").read_text()
    assert "  mirbadllm-agent-0.2.0-linux-x86_64\n" in sums and len(sums.splitlines()) == 3


def test_the_release_workflow_builds_and_lists_an_agent_for_each_os() -> None:
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())["jobs"]
    for name in ("macos", "windows"):
        runs = " ".join(step.get("run", "") for step in jobs[name]["steps"])
        assert "-m installers.agent_build --dist dist" in runs, name
    assert "mirbadllm-agent-*" in jobs["macos"]["steps"][-1]["with"]["path"]
    signing = next(step["run"] for step in jobs["windows"]["steps"] if "sign-argv" in step.get("run", ""))
    assert "Get-ChildItem dist\\mirbadllm-agent-*.exe" in signing  # signed like the installer's programs
    publish = " ".join(step.get("run", "") for step in jobs["publish"]["steps"])
    for platform in ("agent-linux-x86_64", "agent-macos-arm64", "agent-windows-x86_64"):
        assert f'"{platform}=$(ls artefacts/' in publish, platform
    assert '"windows-x86_64-exe=$(ls artefacts/windows/*-setup.exe)"' in publish  # not the agent's .exe
