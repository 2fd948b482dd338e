"""Where an agent finds its ggml-rpc-server (``RuntimeCatalog.rpc_server``), and which build runs."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from agent.runtimes.catalog import RuntimeCatalog


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _build(root: Path, key: str, *, rpc: str | None = "bin/ggml-rpc-server", built_at: float = 1000.0) -> Path:
    """A portable build as ``make runtime`` leaves it, with ``rpc`` as its manifest's rpc_server."""
    folder = root / f"llamacpp-1.0.0-{key}"
    _exe(folder / "bin" / "llama-server")
    if rpc is not None and not rpc.startswith("/"):
        _exe(folder / rpc)
    manifest = {"runtime": "llamacpp", "version": "1.0.0", "system": "Linux", "machine": "x86_64",
                "server": "bin/llama-server"}
    if rpc is not None:
        manifest["rpc_server"] = rpc
    (folder / "runtime.json").write_text(json.dumps(manifest))
    os.utime(folder / "runtime.json", (built_at, built_at))
    return folder


def _catalog(root: Path, configured: Path | None = None) -> RuntimeCatalog:
    return RuntimeCatalog(configured, environ={"PATH": ""}, runtime_roots=[root], sys_platform="linux",
                          distribution="no-such-distribution")


def test_a_build_names_its_rpc_server_in_its_manifest(tmp_path: Path) -> None:
    folder = _build(tmp_path / "runtimes", "aaa")
    exe = _catalog(tmp_path / "runtimes").rpc_server()
    assert exe is not None and exe.path == (folder / "bin" / "ggml-rpc-server").resolve()
    assert exe.library_dir == (folder / "bin").resolve()


def test_a_build_without_rpc_or_pointing_outside_has_none(tmp_path: Path) -> None:
    _build(tmp_path / "a", "aaa", rpc=None)
    assert _catalog(tmp_path / "a").rpc_server() is None
    outside = _exe(tmp_path / "elsewhere" / "ggml-rpc-server")
    _build(tmp_path / "b", "bbb", rpc=str(outside))
    assert _catalog(tmp_path / "b").rpc_server() is None


def test_of_two_builds_of_one_version_the_one_built_last_runs(tmp_path: Path) -> None:
    root = tmp_path / "runtimes"
    _build(root, "zzz", rpc=None, built_at=1000.0)  # an older build without RPC, sorting last by name
    newer = _build(root, "aaa", built_at=2000.0)
    catalog = _catalog(root)
    server = catalog.llama_server()
    assert server is not None and server.path == (newer / "bin" / "llama-server").resolve()
    assert catalog.rpc_server() is not None


def test_a_configured_llama_server_has_the_rpc_server_beside_it(tmp_path: Path) -> None:
    server = _exe(tmp_path / "bin" / "llama-server")
    assert _catalog(tmp_path / "none", server).rpc_server() is None
    rpc = _exe(tmp_path / "bin" / "ggml-rpc-server")
    exe = _catalog(tmp_path / "none", server).rpc_server()
    assert exe is not None and exe.path == rpc
