"""The AppImage: ``dist/MirbadLLM-<version>-x86_64.AppImage`` from the frozen program.

An AppImage (type 2) is an ELF runtime with a squashfs image of an AppDir appended, marked by the
bytes ``AI\\x02`` at offset 8 of the ELF header. The runtime is our own (``appimage/runtime.c``):
the AppImage project's runtime is a prebuilt binary, and it mounts the image with FUSE, which many
distributions no longer install. Ours unpacks the image once into the user's cache and runs AppRun
from there. It is compiled here, statically, against squashfuse's library (Debian:
``libsquashfuse-dev`` and the decompressors' ``-dev`` packages), and the image is made with
``mksquashfs`` (``squashfs-tools``).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

RUNTIME_SOURCE = Path(__file__).resolve().parent / "appimage" / "runtime.c"
MAGIC_OFFSET = 8
MAGIC = b"AI\x02"
BUILD_PACKAGES = ("squashfs-tools", "libsquashfuse-dev", "zlib1g-dev", "liblzma-dev", "liblzo2-dev",
                  "liblz4-dev", "libzstd-dev")


class AppImageError(RuntimeError):
    """The AppImage cannot be built here; ``str()`` says what to install."""


def appimage_name(version: str, machine: str = "x86_64") -> str:
    return f"MirbadLLM-{version}-{machine}.AppImage"


def runtime_compile_argv(source: Path, out: Path, cc: str = "cc") -> list[str]:
    return [cc, "-static", "-Os", "-s", "-Wall", "-Wextra", "-o", str(out), str(source), "-I/usr/include/squashfuse",
            "-lsquashfuse", "-lz", "-llzma", "-llzo2", "-llz4", "-lzstd"]


def mksquashfs_argv(appdir: Path, image: Path) -> list[str]:
    return ["mksquashfs", str(appdir), str(image), "-comp", "zstd", "-root-owned", "-noappend", "-quiet",
            "-no-progress"]


def desktop_entry() -> str:
    return ("[Desktop Entry]\nType=Application\nName=MirbadLLM\n"
            "Comment=Run local language models behind one OpenAI-compatible endpoint\n"
            "Exec=mirbadllm\nIcon=mirbadllm\nTerminal=false\nCategories=Development;Utility;\n")


def mark(data: bytearray) -> bytearray:
    """Write the type-2 magic into the runtime's ELF header padding (``e_ident[8:11]``)."""
    if data[:4] != b"\x7fELF":
        raise AppImageError("the runtime is not an ELF file")
    data[MAGIC_OFFSET:MAGIC_OFFSET + len(MAGIC)] = MAGIC
    return data


def missing_tools(cc: str = "cc") -> list[str]:
    missing = [tool for tool in (cc, "mksquashfs") if shutil.which(tool) is None]
    if not Path("/usr/include/squashfuse/squashfuse.h").is_file():
        missing.append("squashfuse headers")
    return missing


def build_runtime(work: Path, cc: str = "cc") -> Path:
    out = work / "appimage-runtime"
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(runtime_compile_argv(RUNTIME_SOURCE, out, cc), check=True)
    return out


def lay_out_appdir(program: Path, entry: str, icon: Path, appdir: Path) -> Path:
    """``appdir`` with ``program`` (a folder) inside, AppRun -> ``<program>/<entry>``, desktop file, icon."""
    if appdir.exists():
        shutil.rmtree(appdir)
    appdir.mkdir(parents=True)
    shutil.copytree(program, appdir / program.name, symlinks=True)
    (appdir / "AppRun").symlink_to(f"{program.name}/{entry}")
    (appdir / "mirbadllm.desktop").write_text(desktop_entry())
    shutil.copyfile(icon, appdir / "mirbadllm.png")
    (appdir / ".DirIcon").symlink_to("mirbadllm.png")
    return appdir


def assemble(runtime: Path, image: Path, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        f.write(mark(bytearray(runtime.read_bytes())))
        with open(image, "rb") as src:
            shutil.copyfileobj(src, f, 1 << 20)
    tmp.chmod(0o755)
    os.replace(tmp, out)
    return out


def build_appimage(program: Path, entry: str, icon: Path, out: Path, work: Path,
                   runtime: Path | None = None, cc: str = "cc") -> Path:
    missing = missing_tools(cc)
    if runtime is None and missing:
        raise AppImageError(f"cannot build the AppImage: {', '.join(missing)} missing "
                            f"(Debian: apt install {' '.join(BUILD_PACKAGES)})")
    runtime = runtime or build_runtime(work, cc)
    appdir = lay_out_appdir(program, entry, icon, work / "AppDir")
    image = work / "image.squashfs"
    subprocess.run(mksquashfs_argv(appdir, image), check=True, stdout=subprocess.DEVNULL)
    return assemble(runtime, image, out)
