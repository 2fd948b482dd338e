"""The llama-server that `make runtime` built holds no instruction a CPU of its kind may lack."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# AMX tile instructions: they fault where the kernel has not granted the process the tile state.
AMX = re.compile(r"\b(ldtilecfg|sttilecfg|tilerelease|tilezero|tileloadd|tileloaddt1|tilestored|"
                 r"tdpbssd|tdpbsud|tdpbusd|tdpbuud|tdpbf16ps|tdpfp16ps)\b")
VECTOR_REGISTERS = re.compile(r"%[yz]mm\d")


def _disassembly(path: Path) -> str:
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def build_dir(real_llama_server: Path) -> Path:
    folder = real_llama_server.parent.parent
    if not (folder / "runtime.json").is_file():
        pytest.skip(f"{real_llama_server} is not a `make runtime` build")
    if platform.machine().lower() not in ("x86_64", "amd64") or shutil.which("objdump") is None:
        pytest.skip("checks x86-64 builds with objdump")
    return folder


def test_the_manifest_lists_the_cpu_variants_and_every_file_is_as_built(build_dir: Path) -> None:
    manifest = json.loads((build_dir / "runtime.json").read_text())
    bin_dir = build_dir / "bin"
    variants = sorted(p.name for p in bin_dir.glob("libggml-cpu-*.so"))
    assert variants == sorted(f"libggml-cpu-{v}.so" for v in manifest["cpu_variants"])
    assert "-DGGML_NATIVE=OFF" in manifest["cmake_args"]
    assert set(manifest["files"]) >= {"bin/llama-server", *(f"bin/{v}" for v in variants)}


def test_no_library_of_the_build_holds_an_amx_instruction(build_dir: Path) -> None:
    libraries = [p for p in (build_dir / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    found = {p.name: sorted(set(AMX.findall(_disassembly(p)))) for p in libraries}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_baseline_variant_and_the_shared_code_run_on_any_x86_64(build_dir: Path) -> None:
    """No AVX register outside the variants that ggml only loads on CPUs that have them."""
    bin_dir = build_dir / "bin"
    shared = [p for p in bin_dir.iterdir() if p.is_file() and not p.is_symlink()
              and not (p.name.startswith("libggml-cpu-") and p.name != "libggml-cpu-x64.so")]
    assert any(p.name == "libggml-cpu-x64.so" for p in shared)
    wide = {p.name for p in shared if VECTOR_REGISTERS.search(_disassembly(p))}
    assert wide == set()


def test_the_build_does_not_report_the_enclosing_checkout_as_its_version(build_dir: Path) -> None:
    """llama.cpp's CMake asked git, found this repository around the build and printed its commit
    count and hash as llama.cpp's version; offers, pins and rollouts read that. The build says
    "unknown" and the offer falls back to the manifest's version."""
    from agent.runtimes.llamacpp import offered_version, parse_version_output

    bin_dir = build_dir / "bin"
    done = subprocess.run([str(bin_dir / "llama-server"), "--version"], capture_output=True, text=True,
                          timeout=60, env={"LD_LIBRARY_PATH": str(bin_dir)}, check=False)
    reported = parse_version_output(done.stdout + done.stderr)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent, check=False).stdout.strip()
    assert reported.build is None and reported.commit is None, reported.text
    assert not head or head not in reported.text
    manifest = json.loads((build_dir / "runtime.json").read_text())
    assert offered_version(reported, manifest["version"]) == f"{manifest['version']} (runtime.json)"
