"""The AppImage: our FUSE-free runtime, built and run for real on a small AppDir."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from installers import appimage

ROOT = Path(__file__).resolve().parents[2]


def test_the_magic_goes_into_the_elf_padding_and_nothing_else_changes() -> None:
    elf = bytearray(b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"rest")
    marked = appimage.mark(bytearray(elf))
    assert marked[8:11] == b"AI\x02" and marked[:8] == elf[:8] and marked[11:] == elf[11:]
    with pytest.raises(appimage.AppImageError, match="not an ELF"):
        appimage.mark(bytearray(b"#!/bin/sh\n"))


def test_names_and_the_tools_it_runs() -> None:
    assert appimage.appimage_name("0.1.0") == "MirbadLLM-0.1.0-x86_64.AppImage"
    assert appimage.mksquashfs_argv(Path("A"), Path("i"))[:4] == ["mksquashfs", "A", "i", "-comp"]
    assert appimage.runtime_compile_argv(Path("r.c"), Path("r"))[:3] == ["cc", "-static", "-Os"]


@pytest.mark.skipif(bool(appimage.missing_tools()), reason="needs cc, mksquashfs and libsquashfuse-dev")
def test_a_built_appimage_unpacks_once_and_runs_its_apprun_with_the_arguments(tmp_path: Path) -> None:
    program = tmp_path / "prog"
    program.mkdir()
    (program / "data.txt").write_text("payload\n")
    (program / "link").symlink_to("data.txt")
    entry = program / "run"
    entry.write_text('#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")\n'
                     'echo "args=$* appimage=$APPIMAGE data=$(cat "$d/link")"\n')
    entry.chmod(0o755)
    out = tmp_path / "dist" / appimage.appimage_name("0.0.1")
    built = appimage.build_appimage(program, "run", ROOT / "resources" / "icons" / "png" / "app-256.png", out,
                                    tmp_path / "work")
    assert built.read_bytes()[8:11] == b"AI\x02" and os.access(built, os.X_OK)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    first = subprocess.run([str(built), "one", "two"], env=env, capture_output=True, text=True, check=True)
    assert first.stdout == f"args=one two appimage={built} data=payload\n"
    (cache,) = (tmp_path / "home" / ".cache" / "mirbadllm" / "appimage").iterdir()
    assert (cache / ".complete").exists() and (cache / "mirbadllm.desktop").read_text() == appimage.desktop_entry()
    again = subprocess.run([str(built)], env=env, capture_output=True, text=True, check=True)
    assert again.stdout.startswith("args= ") and len(list(cache.parent.iterdir())) == 1  # unpacked once
    offset = subprocess.run([str(built), "--appimage-offset"], env=env, capture_output=True, text=True, check=True)
    assert int(offset.stdout) == (tmp_path / "work" / "appimage-runtime").stat().st_size
    subprocess.run([str(built), "--appimage-extract"], env=env, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "squashfs-root" / "prog" / "data.txt").read_text() == "payload\n"
    assert os.readlink(tmp_path / "squashfs-root" / "AppRun") == "prog/run"
    shutil.rmtree(tmp_path / "squashfs-root")
