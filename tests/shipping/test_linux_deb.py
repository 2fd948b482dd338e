"""The Debian package's texts, exactly, and its file tree."""

from __future__ import annotations

import shutil
from pathlib import Path

from installers import linux_deb
from installers.package import sha256sums_text

ROOT = Path(__file__).resolve().parents[2]


def test_the_control_file_declares_the_qt_xcb_libraries() -> None:
    text = linux_deb.control_text("0.2.0", "amd64", 345000)
    assert text.splitlines()[:5] == ["Package: mirbadllm", "Version: 0.2.0", "Architecture: amd64",
                                     "Maintainer: MirbadLLM <team@mirbadllm.dev>", "Installed-Size: 345000"]
    depends = next(line for line in text.splitlines() if line.startswith("Depends: "))
    for library in ("libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0", "libgomp1"):
        assert library in depends.split(": ", 1)[1].split(", ")
    assert text.endswith(" behind one OpenAI-compatible endpoint, managed from a desktop app and a tray icon.\n")


def test_the_desktop_entry() -> None:
    assert linux_deb.desktop_entry() == (
        "[Desktop Entry]\nType=Application\nName=MirbadLLM\nGenericName=Local language models\n"
        "Comment=Run local language models behind one OpenAI-compatible endpoint\nExec=/usr/bin/mirbadllm\n"
        "Icon=mirbadllm\nTerminal=false\nCategories=Development;Utility;\nStartupWMClass=mirbadllm\n")


def test_purge_removes_the_service_state_and_its_user_and_remove_stops_the_service() -> None:
    postrm = linux_deb.postrm_text()
    assert 'if [ "$1" = "purge" ]; then\n    rm -rf /var/lib/mirbadllm-agent\n' in postrm
    assert "deluser --quiet --system mirbadllm-agent" in postrm
    assert "systemctl stop mirbadllm-agent.service" in linux_deb.prerm_text()
    postinst = linux_deb.postinst_text()
    assert "adduser --system --group --home /var/lib/mirbadllm-agent --no-create-home --quiet mirbadllm-agent" in postinst
    assert "systemctl enable" not in postinst  # nothing starts by itself: the app starts the daemon


def test_names_and_architectures() -> None:
    assert linux_deb.deb_file_name("0.1.0") == "mirbadllm_0.1.0_amd64.deb"
    assert [linux_deb.deb_architecture(m) for m in ("x86_64", "AMD64", "aarch64")] == ["amd64", "amd64", "arm64"]


def test_the_tree_holds_the_program_a_link_on_path_the_units_and_the_icons(tmp_path: Path) -> None:
    frozen = tmp_path / "frozen"
    (frozen / "_internal").mkdir(parents=True)
    (frozen / "mirbadllm").write_text("#!/bin/sh\n")
    root = linux_deb.lay_out(frozen, ROOT / "resources", tmp_path / "root", "0.1.0", "amd64")
    assert (root / "usr/bin/mirbadllm").readlink() == Path("/opt/mirbadllm/mirbadllm")
    assert (root / "opt/mirbadllm/mirbadllm").is_file()
    assert (root / "usr/lib/systemd/system/mirbadllm-agent.service").read_text().startswith("[Unit]\n")
    assert "ExecStart=/usr/bin/mirbadllm daemon" in (root / "usr/lib/systemd/user/mirbadllm-daemon.service").read_text()
    assert sorted(p.parent.parent.name for p in (root / "usr/share/icons/hicolor").rglob("mirbadllm.*")) == [
        "16x16", "256x256", "32x32", "64x64", "scalable"]
    for script in ("postinst", "prerm", "postrm"):
        assert (root / "DEBIAN" / script).stat().st_mode & 0o111
    if shutil.which("dpkg-deb"):
        out = linux_deb.build_deb(frozen, ROOT / "resources", tmp_path / "dist", "0.1.0", "x86_64", tmp_path / "w")
        assert out.name == "mirbadllm_0.1.0_amd64.deb" and out.stat().st_size > 0


def test_sha256sums_reads_as_sha256sum_writes_it(tmp_path: Path) -> None:
    (tmp_path / "b.deb").write_bytes(b"b")
    (tmp_path / "a.AppImage").write_bytes(b"")
    assert sha256sums_text([tmp_path / "b.deb", tmp_path / "a.AppImage"]) == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a.AppImage\n"
        "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b.deb\n")


def test_the_package_step_signs_what_the_update_checker_verifies(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from core.releases.signing import (
        load_private_key_file,
        private_key_pem,
        public_key_b64,
        verify_feed_signature,
    )
    from installers.package import sign_file

    key = Ed25519PrivateKey.generate()
    key_file = tmp_path / "release.key"
    key_file.write_bytes(private_key_pem(key))
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("abc  mirbadllm_0.1.0_amd64.deb\n")
    signature = sign_file(sums, key_file)
    trusted = [public_key_b64(load_private_key_file(key_file))]
    assert verify_feed_signature(sums.read_bytes(), signature.read_bytes(), trusted) is None
    sums.write_text("abd  mirbadllm_0.1.0_amd64.deb\n")  # tampered
    assert verify_feed_signature(sums.read_bytes(), signature.read_bytes(), trusted) is not None


def test_a_build_trusts_the_key_make_package_signed_it_with(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from core.releases.signing import (
        bundled_release_keys,
        private_key_pem,
        public_key_b64,
    )
    from installers.package import release_keys_file

    key = Ed25519PrivateKey.generate()
    (tmp_path / "release.key").write_bytes(private_key_pem(key))
    written = release_keys_file(tmp_path / "release.key", tmp_path / "work")
    assert written.name == "release-keys.json"
    assert bundled_release_keys(str(written.parent)) == (public_key_b64(key),)
    assert bundled_release_keys(str(tmp_path / "nowhere")) == ()


def test_removing_the_package_stops_what_runs_from_its_files_and_an_upgrade_does_not(tmp_path: Path) -> None:
    """The prerm script, run for real against a program started from a copy of the package's
    folder (here a runtime that is just `sleep`): an upgrade leaves it running to be adopted; a
    removal stops it before its files go."""
    import subprocess

    install = tmp_path / "opt" / "mirbadllm"
    (install / "runtimes").mkdir(parents=True)
    runtime = install / "runtimes" / "llama-server"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", runtime)
    elsewhere = tmp_path / "sleep"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", elsewhere)  # not ours: never touched
    script = tmp_path / "prerm"
    script.write_text(linux_deb.prerm_text(str(install)))
    script.chmod(0o755)
    ours = subprocess.Popen([str(runtime), "300"], start_new_session=True)
    theirs = subprocess.Popen([str(elsewhere), "300"])
    try:
        subprocess.run([str(script), "upgrade", "0.2.0"], check=True, timeout=30)
        assert ours.poll() is None and theirs.poll() is None
        subprocess.run([str(script), "remove"], check=True, timeout=30)
        assert ours.wait(timeout=10) == -15  # SIGTERM
        assert theirs.poll() is None
    finally:
        for proc in (ours, theirs):
            proc.kill()
            proc.wait()
