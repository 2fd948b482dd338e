"""What the macOS and Windows release jobs run, checked here where neither OS is available."""

from __future__ import annotations

import plistlib
from pathlib import Path

import yaml

from installers import macos, windows
from tests.shipping.spec_analysis import analysed, named_paths

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def test_the_inno_setup_script_is_exactly_the_golden_one() -> None:
    golden = (HERE / "golden" / "mirbadllm-0.1.0.iss").read_text()
    assert windows.inno_script("0.1.0", r"dist\mirbadllm") == golden
    assert "AppId={{8C6F3B1E-5E2A-4B8D-9F47-1D2C3B4A5E6F}\n" in golden  # Inno's escaped brace: a stable id
    assert 'Parameters: "agent uninstall-service"' in golden and "[UninstallDelete]" in golden


def test_signtool_signs_with_sha256_and_an_rfc3161_timestamp() -> None:
    assert windows.signtool_argv(r"dist\mirbadllm\mirbadllm.exe", "ABC123") == [
        "signtool", "sign", "/sha1", "ABC123", "/fd", "sha256", "/tr", "http://timestamp.digicert.com",
        "/td", "sha256", r"dist\mirbadllm\mirbadllm.exe"]


def test_the_committed_entitlements_are_the_rendered_ones() -> None:
    assert (ROOT / "installers" / "entitlements.plist").read_bytes() == macos.entitlements_plist()
    assert plistlib.loads(macos.entitlements_plist())["com.apple.security.cs.disable-library-validation"] is True


def test_macos_signs_inside_out_with_the_hardened_runtime(tmp_path: Path) -> None:
    app = tmp_path / "MirbadLLM.app"
    runtime = app / "Contents" / "Resources" / "runtimes" / "llamacpp-1-x" / "bin"
    runtime.mkdir(parents=True)
    (runtime / "llama-server").write_bytes(b"\xcf\xfa\xed\xfe")
    (runtime / "llama-server").chmod(0o755)
    (runtime / "libggml-metal.dylib").write_bytes(b"")
    (app / "Contents" / "MacOS").mkdir(parents=True)
    (app / "Contents" / "MacOS" / "mirbadllm").write_bytes(b"")
    plan = macos.sign_plan(app, "Developer ID Application: MirbadLLM (TEAMID)")
    assert [Path(step[-1]).name for step in plan] == ["libggml-metal.dylib", "llama-server", "MirbadLLM.app"]
    assert plan[-1][:6] == ["codesign", "--force", "--timestamp", "--options", "runtime", "--entitlements"]
    assert macos.notarize_argv(Path("d.dmg"), "mirbadllm") == [
        "xcrun", "notarytool", "submit", "d.dmg", "--keychain-profile", "mirbadllm", "--wait"]
    assert macos.staple_argv(Path("d.dmg")) == ["xcrun", "stapler", "staple", "d.dmg"]
    assert macos.dmg_name("0.1.0") == "MirbadLLM-0.1.0-arm64.dmg"


def test_the_release_workflow_builds_every_os_and_tests_without_e2e_and_netns() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    jobs = workflow["jobs"]
    assert {name: job["runs-on"].split("-")[0] for name, job in jobs.items()} == {
        "linux": "ubuntu", "cuda-pack": "ubuntu", "macos": "macos", "windows": "windows", "publish": "ubuntu"}
    for name in ("macos", "windows"):
        runs = " ".join(step.get("run", "") for step in jobs[name]["steps"])
        assert '-m "not e2e and not netns"' in runs and "installers/pyinstaller/mirbadllm.spec" in runs
    linux = " ".join(step.get("run", "") for step in jobs["linux"]["steps"])
    assert "make test-package" in linux and "make test BACKENDS=cpu,vulkan" in linux
    windows = " ".join(step.get("run", "") for step in jobs["windows"]["steps"])
    assert windows.count("--backends cpu,vulkan") == 2  # what is tested is what is frozen
    # CUDA: a runtime pack per driver line, built with the toolkit from PyPI.
    assert jobs["cuda-pack"]["strategy"]["matrix"]["cuda"] == ["13", "12"]
    assert "make runtime BACKENDS=cpu,cuda MIRBADLLM_CUDA_LINE=${{ matrix.cuda }}" in " ".join(
        step.get("run", "") for step in jobs["cuda-pack"]["steps"])
    # One signed feed lists the installers and the packs, as the daemon's runtime packs read it.
    assert set(jobs["publish"]["needs"]) == {"linux", "cuda-pack", "macos", "windows"}
    publish = " ".join(step.get("run", "") for step in jobs["publish"]["steps"])
    assert "installers.release_feed" in publish
    for platform in ("llamacpp-cuda13-linux-x86_64", "llamacpp-cuda12-linux-x86_64", "linux-x86_64-appimage"):
        assert f'"{platform}=' in publish


def test_every_path_the_spec_names_exists_on_every_os(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for platform in ("linux", "win32", "darwin"):
        named = named_paths(analysed(platform, monkeypatch))
        assert named and all(Path(p).exists() for p in named), (platform, named)


def test_the_desktop_app_has_no_console_window_and_the_command_line_has_one(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    linux = [(m.name, m.kwargs["console"]) for m in analysed("linux", monkeypatch) if m.kind == "EXE"]
    assert linux == [("mirbadllm", True)]  # one program; the desktop entry runs it without a terminal
    for platform, first in (("win32", "mirbadllm"), ("darwin", "mirbadllmw")):
        made = analysed(platform, monkeypatch)
        exes = {m.name: m.kwargs["console"] for m in made if m.kind == "EXE"}
        assert exes == {"mirbadllm": True, "mirbadllmw": False}
        collected = next(m for m in made if m.kind == "COLLECT")
        assert collected.args[0].name == first  # type: ignore[attr-defined] # macOS: the .app runs the windowed one
    golden = (HERE / "golden" / "mirbadllm-0.1.0.iss").read_text()
    assert 'Name: "{group}\\MirbadLLM"; Filename: "{app}\\mirbadllmw.exe"' in golden  # the Start menu opens the app
    assert 'Filename: "{app}\\mirbadllm.exe"; Parameters: "agent install-service"' in golden  # the service: the CLI


def test_a_tagged_release_publishes_the_feed_where_the_app_looks_by_default() -> None:
    from core.releases.feed import DEFAULT_FEED_URL

    publish = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())["jobs"]["publish"]
    attach = next(step for step in publish["steps"] if "gh release" in step.get("run", ""))
    assert attach["if"] == "startsWith(github.ref, 'refs/tags/v')" and "release/*" in attach["run"]
    assert publish["permissions"] == {"contents": "write"}
    assert DEFAULT_FEED_URL.endswith("/releases/latest/download/feed.json")  # the latest release's asset


def test_the_windows_build_carries_what_the_agent_service_imports_lazily(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def hidden(platform: str) -> list[str]:
        made = analysed(platform, monkeypatch)
        return next(m for m in made if m.kind == "Analysis").kwargs["hiddenimports"]  # type: ignore[return-value]

    service = {"servicemanager", "win32service", "win32serviceutil", "pywintypes", "win32timezone"}
    assert service <= set(hidden("win32"))  # mirbadllm.exe agent service imports pywin32 only when started
    assert not service & set(hidden("linux"))
