"""The release side: SHA256SUMS, signing with PEM or raw keys, the feed, the CLI; and the AppImage installer."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.updates import (
    AppImageInstaller,
    StagedUpdate,
    UnsupportedInstaller,
    UpdateError,
    installer_for_this_os,
    make_feed,
    sha256sums_text,
    sign_bytes,
    verify_feed_signature,
)
from app.updates.installer import DebInstaller, MacInstaller, WindowsInstaller
from core.releases.signing import SigningKeyError, public_key_b64
from mirbadllm.updates.cli import main as cli
from tests.updates.release import ReleaseKey

_LOGGER = logging.getLogger(__name__)


def test_sha256sums_lists_every_artefact_in_sha256sum_format(tmp_path: Path) -> None:
    (tmp_path / "b.deb").write_bytes(b"deb")
    (tmp_path / "a.AppImage").write_bytes(b"appimage")
    (tmp_path / ".hidden").write_bytes(b"x")
    (tmp_path / "SHA256SUMS").write_text("old")
    assert sha256sums_text(tmp_path) == (f"{hashlib.sha256(b'appimage').hexdigest()}  a.AppImage\n"
                                         f"{hashlib.sha256(b'deb').hexdigest()}  b.deb\n")


def test_a_raw_32_byte_seed_signs_like_its_pem(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    seed = tmp_path / "seed.bin"
    seed.write_bytes(key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                       serialization.NoEncryption()))
    pem = ReleaseKey.make(tmp_path).path
    signature = sign_bytes(b"feed", seed)
    assert len(base64.b64decode(signature)) == 64
    assert verify_feed_signature(b"feed", signature, [public_key_b64(key)]) is None
    assert verify_feed_signature(b"feed", sign_bytes(b"feed", pem), [public_key_b64(key)]) is not None


def test_a_key_file_that_is_not_ed25519_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "k"
    bad.write_bytes(b"short")
    with pytest.raises(SigningKeyError, match="neither a PEM Ed25519 private key nor a raw 32-byte seed"):
        sign_bytes(b"x", bad)


def test_either_of_two_trusted_keys_verifies_during_a_rotation(tmp_path: Path) -> None:
    old, new = ReleaseKey.make(tmp_path, "old"), ReleaseKey.make(tmp_path, "new")
    assert verify_feed_signature(b"f", new.sign(b"f"), [old.public, new.public]) is None


def test_make_feed_lists_size_and_checksum_relative_or_under_a_base_url(tmp_path: Path) -> None:
    art = tmp_path / "MirbadLLM-0.2.0-x86_64.AppImage"
    art.write_bytes(b"x" * 10)
    feed = make_feed("0.2.0", {"linux-x86_64-appimage": art})
    assert feed.artefacts[0].model_dump() == {"platform": "linux-x86_64-appimage", "url": art.name, "size": 10,
                                              "sha256": hashlib.sha256(b"x" * 10).hexdigest()}
    feed = make_feed("0.2.0", {"linux-x86_64-appimage": art}, base_url="https://example.org/r/0.2.0/")
    assert feed.artefacts[0].url == f"https://example.org/r/0.2.0/{art.name}"
    with pytest.raises(ValueError, match="unknown platform linux-riscv"):
        make_feed("0.2.0", {"linux-riscv": art})


def test_the_cli_makes_a_key_a_signed_feed_and_sums_that_verify(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "release.key"
    assert cli(["keygen", "--out", str(key)]) == 0
    public = capsys.readouterr().out.rsplit(": ", 1)[1].strip()
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert cli(["keygen", "--out", str(key)]) == 1  # never overwrites a release key
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "MirbadLLM.AppImage").write_bytes(b"new build")
    assert cli(["make-feed", "--version", "0.2.0", "--out", str(dist / "feed.json"), "--key", str(key),
                f"linux-x86_64-appimage={dist / 'MirbadLLM.AppImage'}"]) == 0
    assert json.loads((dist / "feed.json").read_text())["version"] == "0.2.0"
    assert cli(["sums", str(dist)]) == 0
    assert cli(["sign", "--key", str(key), str(dist / "SHA256SUMS")]) == 0
    capsys.readouterr()
    assert cli(["verify", str(dist / "feed.json"), "--public-key", public]) == 0
    assert cli(["verify", str(dist / "SHA256SUMS"), "--public-key", public]) == 0
    assert "signature OK" in capsys.readouterr().out
    (dist / "feed.json").write_text((dist / "feed.json").read_text().replace("0.2.0", "9.9.9"))
    assert cli(["verify", str(dist / "feed.json"), "--public-key", public]) == 1


def _staged(tmp_path: Path, payload: bytes) -> StagedUpdate:
    path = tmp_path / "staging" / "MirbadLLM-0.2.0-x86_64.AppImage"
    path.parent.mkdir()
    path.write_bytes(payload)
    return StagedUpdate("0.2.0", "linux-x86_64-appimage", path, len(payload), hashlib.sha256(payload).hexdigest())


def test_the_appimage_installer_swaps_the_file_and_keeps_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "apps" / "MirbadLLM.AppImage"
    target.parent.mkdir()
    target.write_bytes(b"0.1.0")
    installer = AppImageInstaller(target)
    assert installer.apply(_staged(tmp_path, b"0.2.0 build")) == target
    assert target.read_bytes() == b"0.2.0 build" and os.access(target, os.X_OK)
    assert (tmp_path / "apps" / "MirbadLLM.AppImage.old").read_bytes() == b"0.1.0"
    assert sorted(p.name for p in target.parent.iterdir()) == ["MirbadLLM.AppImage", "MirbadLLM.AppImage.old"]


def test_the_appimage_installer_refuses_a_staged_file_changed_after_verification(tmp_path: Path) -> None:
    target = tmp_path / "MirbadLLM.AppImage"
    target.write_bytes(b"0.1.0")
    staged = _staged(tmp_path, b"0.2.0 build")
    staged.path.write_bytes(b"0.2.0 evil!")
    with pytest.raises(UpdateError, match="Checksum check failed: the staged MirbadLLM-0.2.0-x86_64.AppImage "
                                          "changed since it was verified"):
        AppImageInstaller(target).apply(staged)
    assert target.read_bytes() == b"0.1.0"


@pytest.mark.parametrize(("platform", "environ", "executable", "expected"), [
    ("linux", {"APPIMAGE": "/opt/MirbadLLM.AppImage"}, "/tmp/x/mirbadllm", AppImageInstaller),
    ("linux", {}, "/opt/mirbadllm/mirbadllm", DebInstaller),
    ("darwin", {}, "/Applications/MirbadLLM.app/Contents/MacOS/mirbadllm", MacInstaller),
    ("win32", {}, r"C:\Program Files\MirbadLLM\mirbadllm.exe", WindowsInstaller),
])
def test_each_os_gets_the_installer_of_how_it_was_installed(platform: str, environ: dict[str, str],
                                                            executable: str, expected: type) -> None:
    installer = installer_for_this_os(platform, environ, executable=executable, frozen=True)
    assert isinstance(installer, expected) and installer.unsupported is None


def test_a_copy_from_source_or_an_unknown_install_says_why_it_cannot_update(tmp_path: Path) -> None:
    staged = _staged(tmp_path, b"x")
    for installer in (installer_for_this_os("linux", {}, executable="/usr/bin/python3", frozen=False),
                      installer_for_this_os("linux", {}, executable="/home/u/dist/mirbadllm", frozen=True)):
        assert isinstance(installer, UnsupportedInstaller) and installer.unsupported
        with pytest.raises(UpdateError, match="Install failed: "):
            installer.apply(staged)


def test_the_deb_is_installed_by_the_package_manager_after_its_checksum_is_checked(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    staged = _staged(tmp_path, b"a deb")
    staged = replace(staged, platform="linux-x86_64-deb")
    installer = DebInstaller(run=lambda argv: ran.append(list(argv)) or 0)
    assert installer.apply(staged) == Path("/usr/bin/mirbadllm")
    assert ran == [["pkexec", "apt-get", "install", "-y", "--reinstall", str(staged.path.absolute())]]
    refused = DebInstaller(run=lambda argv: 126)
    with pytest.raises(UpdateError, match="administrator password was not given.*sudo apt install"):
        refused.apply(staged)
    staged.path.write_bytes(b"tampered")
    with pytest.raises(UpdateError, match="Checksum check failed"):
        DebInstaller(run=lambda argv: ran.append(list(argv)) or 0).apply(staged)
    assert len(ran) == 1  # nothing ran for the tampered file
    assert installer.restart_command(Path("/usr/bin/mirbadllm"), 42)[-2:] == ["42", "/usr/bin/mirbadllm"]


def test_macos_attaches_the_dmg_copies_the_app_and_swaps_it_in(tmp_path: Path) -> None:
    app = tmp_path / "Applications" / "MirbadLLM.app"
    (app / "Contents").mkdir(parents=True)
    (app / "Contents" / "version").write_text("0.1.0")
    staged = replace(_staged(tmp_path, b"a dmg"), platform="macos-arm64-dmg")
    ran: list[list[str]] = []

    def run(argv: Sequence[str]) -> int:
        ran.append(list(argv))
        if argv[0] == "ditto":  # what ditto would copy out of the attached image
            fresh = Path(argv[2])
            (fresh / "Contents").mkdir(parents=True)
            (fresh / "Contents" / "version").write_text("0.2.0")
        return 0

    assert MacInstaller(app, run).apply(staged) == app
    assert [a[:2] for a in ran] == [["hdiutil", "attach"], ["ditto", str(staged.path.with_name("mount") / app.name)],
                                    ["hdiutil", "detach"]]
    assert (app / "Contents" / "version").read_text() == "0.2.0"
    assert sorted(p.name for p in app.parent.iterdir()) == ["MirbadLLM.app"]


def test_windows_runs_the_verified_installer_silently_after_the_app_has_exited(tmp_path: Path) -> None:
    staged = replace(_staged(tmp_path, b"an exe"), platform="windows-x86_64-exe")
    installer = WindowsInstaller()
    program = installer.apply(staged)
    command = installer.restart_command(program, 4242)
    assert command[:4] == ["powershell", "-NoProfile", "-NonInteractive", "-Command"]
    assert command[4].startswith("Wait-Process -Id 4242") and "'/VERYSILENT'" in command[4]
    assert str(staged.path) in command[4]
