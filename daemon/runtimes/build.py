"""The llama.cpp build a rollout ships: a ``make runtime`` folder, checked, then packed for the agents.

The folder is ``llamacpp-<version>-<key>/`` (``installers/llamacpp_runtime.py``) with a
``runtime.json`` that lists the SHA-256 of every file. Before anything is sent, each listed file
must have its digest (a build changed after it was made is refused here, naming the file), and
the pack holds exactly ``runtime.json``, the listed files and the folder's links to a file name
beside them (the shared libraries' ``.so`` links). The agent checks it all again before use.
"""

from __future__ import annotations

import json
import os
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from core.hashing import file_sha256

MANIFEST = "runtime.json"


class BuildRefused(Exception):
    """The folder is not a whole, unchanged llama.cpp build; ``str()`` says what is wrong."""


@dataclass(frozen=True)
class StagedRuntimeBuild:
    folder: Path
    name: str
    version: str
    system: str
    machine: str
    archive: Path
    size: int
    sha256: str


def default_builds_root() -> Path:
    """Where ``make runtime`` builds for this program (the agent's catalog looks there too)."""
    return Path(sys.prefix) / "share" / "mirbadllm" / "runtimes"


def newest_build(root: Path) -> Path | None:
    """The build folder under ``root`` whose runtime.json says the highest version."""
    def key(folder: Path) -> tuple[int, ...]:
        try:
            version = str(json.loads((folder / MANIFEST).read_text()).get("version", "0"))
        except (OSError, ValueError, AttributeError):
            return (-1,)
        return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))
    try:
        folders = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("llamacpp-")]
    except OSError:
        return None
    usable = [p for p in folders if key(p) != (-1,)]
    return max(usable, key=key) if usable else None


def _manifest(folder: Path) -> dict[str, object]:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise BuildRefused(f"{folder} is not a llama.cpp build: it has no {MANIFEST} (build one with "
                           "`make runtime`)") from None
    except (OSError, ValueError) as exc:
        raise BuildRefused(f"cannot read {folder / MANIFEST}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("runtime") != "llamacpp":
        raise BuildRefused(f"{folder / MANIFEST} is not a llama.cpp build's manifest")
    return manifest


def load_build(folder: Path, packs: Path) -> StagedRuntimeBuild:
    """Check ``folder`` and pack it into ``packs/{name}.tar.gz``. Blocking (it hashes every file)."""
    folder = folder.resolve()
    manifest = _manifest(folder)
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BuildRefused(f"{folder / MANIFEST} lists no files")
    for rel, digest in sorted(files.items()):
        path = folder / str(rel)
        if not path.resolve().is_relative_to(folder) or not path.is_file():
            raise BuildRefused(f"the build {folder.name} lacks {rel}, which its {MANIFEST} lists")
        if file_sha256(path) != digest:
            raise BuildRefused(f"the build {folder.name} was changed after it was made: {rel} does not have "
                               f"the SHA-256 its {MANIFEST} names; rebuild it with `make runtime`")
    links = [p for p in sorted(folder.rglob("*")) if p.is_symlink() and "/" not in os.readlink(p)]
    packs.mkdir(parents=True, exist_ok=True)
    archive = packs / f"{folder.name}.tar.gz"
    partial = archive.with_name(f".{archive.name}.partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(folder / MANIFEST, arcname=f"{folder.name}/{MANIFEST}")
        for rel in sorted(files):
            tar.add(folder / str(rel), arcname=f"{folder.name}/{rel}", recursive=False)
        for link in links:
            tar.add(link, arcname=f"{folder.name}/{link.relative_to(folder).as_posix()}", recursive=False)
    os.replace(partial, archive)
    return StagedRuntimeBuild(folder=folder, name=folder.name, version=str(manifest.get("version", "")),
                              system=str(manifest.get("system", "")), machine=str(manifest.get("machine", "")),
                              archive=archive, size=archive.stat().st_size, sha256=file_sha256(archive))
