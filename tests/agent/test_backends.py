"""A node's GPU backends: found out from the build itself, proven on the first start, and a backend
that fails falls back to the next with its reason (``agent.api.backends``, ``agent.runtimes.backends``).

The build here is the fake llama-server with fake GPU modules (JSON files it reads through
``GGML_BACKEND_PATH``, as the real one loads a module); the real Vulkan build on Mesa's lavapipe is
``tests/e2e/test_vulkan_backend.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.api.backends import (
    Backend,
    BackendState,
    Device,
    parse_list_devices,
    parse_offload,
    pick_backend,
)
from agent.api.launch_policy import PolicyViolation, check_env
from agent.api.models import InstanceState
from agent.manager import InstanceManager
from agent.runtimes.backends import interpret_listing
from tests.agent._support import make_spec
from tests.fakes import write_fake_build

READY, FAILED = InstanceState.READY, InstanceState.FAILED
GPU = {"devices": [["Vulkan0", "Fake Radeon (RADV NAVI33)", 8176, 8000]]}


def _state(backend: Backend, available: bool = True, reason: str | None = None) -> BackendState:
    return BackendState(backend=backend, available=available, reason=reason)


def test_auto_takes_the_best_backend_that_works_and_a_choice_falls_back_with_its_reason() -> None:
    cpu, vulkan, cuda = _state(Backend.CPU), _state(Backend.VULKAN), _state(Backend.CUDA)
    assert pick_backend("auto", [cpu, vulkan, cuda]).backend is Backend.CUDA
    assert pick_backend("auto", [cpu, vulkan]).backend is Backend.VULKAN
    assert pick_backend("vulkan", [cpu, vulkan, cuda]).backend is Backend.VULKAN
    assert pick_backend("cpu", [cpu, vulkan, cuda]) == pick_backend("cpu", [cpu])
    assert pick_backend("cpu", [cpu, cuda]).backend is Backend.CPU
    broken = _state(Backend.CUDA, False, "the driver is too old")
    fallback = pick_backend("auto", [cpu, vulkan, broken])
    assert fallback.backend is Backend.VULKAN and fallback.why == "CUDA: the driver is too old"
    missing = pick_backend("cuda", [cpu])
    assert missing.backend is Backend.CPU and "has no CUDA backend" in (missing.why or "")
    assert pick_backend("auto", [cpu, _state(Backend.METAL)]).backend is Backend.METAL


def test_the_build_s_own_device_list_and_load_log_are_read() -> None:
    listing = ("ggml_vulkan: Found 1 Vulkan devices:\nAvailable devices:\n"
               "  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (24029 MiB, 24029 MiB free)\n"
               "  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)\n")
    assert parse_list_devices(listing) == [
        Device(name="Vulkan0", description="llvmpipe (LLVM 15.0.6, 256 bits)", memory_total_mib=24029,
               memory_free_mib=24029),
        Device(name="CUDA0", description="NVIDIA GeForce RTX 4090", memory_total_mib=24080, memory_free_mib=23500)]
    offload = parse_offload([
        "load_tensors: offloaded 19/19 layers to GPU",
        "load_tensors:      Vulkan0 model buffer size =   241.41 MiB",
        "load_tensors:   CPU_Mapped model buffer size =    40.50 MiB",
        "llama_kv_cache:    Vulkan0 KV buffer size =    18.00 MiB"])
    assert (offload.layers_on_gpu, offload.layers_total, offload.devices) == (19, 19, ["Vulkan0"])
    assert offload.model_mib == {"Vulkan0": 241.41, "CPU_Mapped": 40.5} and offload.kv_mib == {"Vulkan0": 18.0}
    cpu_only = parse_offload([  # what a build without a GPU module says: the layers stay with the CPU
        "load_tensors: offloaded 19/19 layers to GPU", "load_tensors:   CPU_Mapped model buffer size =   170.00 MiB"])
    assert (cpu_only.layers_on_gpu, cpu_only.layers_total, cpu_only.devices) == (0, 19, [])


def test_a_module_that_crashes_or_will_not_load_or_sees_nothing_says_why() -> None:
    crashed = interpret_listing(Backend.VULKAN, "ggml_vulkan: starting\n", -11, None)
    assert not crashed.available and "was killed by SIGSEGV while listing its devices" in (crashed.reason or "")
    unloadable = interpret_listing(Backend.CUDA, "load_backend: failed to load /x/libggml-cuda.so: libcuda.so.1: "
                                   "cannot open shared object file\nAvailable devices:\n", 0, Path("/x/libggml-cuda.so"))
    assert not unloadable.available and "libggml-cuda.so does not load: libcuda.so.1" in (unloadable.reason or "")
    nothing = interpret_listing(Backend.VULKAN, "Available devices:\n  (none)\n", 0, None)
    assert not nothing.available and "GGML_VK_VISIBLE_DEVICES" in (nothing.reason or "")


def test_a_spec_can_never_choose_the_module_itself() -> None:
    for name in ("GGML_BACKEND_PATH", "GGML_BACKEND_DIR"):
        with pytest.raises(PolicyViolation, match="they load code"):
            check_env({name: "/tmp/evil.so"})


def _log(manager: InstanceManager) -> str:
    return "\n".join(manager.get("m").logs.tail(2000))


async def _ready_or_failed(manager: InstanceManager) -> InstanceState:
    assert await manager.wait_for(lambda: manager.info("m").state in (READY, FAILED), 30), manager.info("m")
    return manager.info("m").state


async def _offered(manager: InstanceManager) -> dict[Backend, BackendState]:
    offer = await manager.driver.offer()
    return {s.backend: s for s in offer.backends}


async def test_auto_computes_on_the_gpu_module_and_the_first_start_proves_it(
        make_manager: Callable[..., InstanceManager], tmp_path: Path, model_file: Path) -> None:
    write_fake_build(tmp_path / "runtimes", {"vulkan": GPU})
    manager = make_manager(None, runtime_roots=[tmp_path / "runtimes"])
    before = await _offered(manager)
    assert before[Backend.VULKAN].available and not before[Backend.VULKAN].verified
    assert [d.name for d in before[Backend.VULKAN].devices] == ["Vulkan0"]
    assert before[Backend.VULKAN].devices[0].memory_total_mib == 8176
    await manager.start(make_spec(model_file))
    assert await _ready_or_failed(manager) is READY
    info = manager.info("m")
    assert info.backend == "vulkan" and info.offload is not None
    assert (info.offload.layers_on_gpu, info.offload.layers_total, info.offload.devices) == (19, 19, ["Vulkan0"])
    assert "[mirbadllm] backend: Vulkan on Vulkan0 (Fake Radeon (RADV NAVI33)) (node choice: auto)" in _log(manager)
    after = await _offered(manager)
    assert after[Backend.VULKAN].verified and after[Backend.VULKAN].reason is None
    details = [r["detail"] for r in json.loads(manager.driver.paths.runtime_checks_file.read_text())["checks"].values()]
    assert "one-token generation with 19/19 layers on Vulkan0" in details


async def test_the_node_s_choice_of_cpu_keeps_the_gpu_module_out(
        make_manager: Callable[..., InstanceManager], tmp_path: Path, model_file: Path) -> None:
    write_fake_build(tmp_path / "runtimes", {"vulkan": GPU})
    manager = make_manager(None, runtime_roots=[tmp_path / "runtimes"])
    await manager.start(make_spec(model_file, backend="cpu"))
    assert await _ready_or_failed(manager) is READY
    info = manager.info("m")
    assert info.backend == "cpu" and info.offload is not None and info.offload.layers_on_gpu == 0
    assert info.offload.devices == []


@pytest.mark.parametrize(("module", "words"), [
    ({**GPU, "list": "crash"}, "was killed by SIGSEGV while listing its devices"),
    ({**GPU, "list": "unloadable", "why": "libvulkan.so.1: cannot open shared object file"},
     "does not load: libvulkan.so.1: cannot open shared object file"),
    ({"devices": []}, "no Vulkan GPU found"),
])
async def test_a_module_that_cannot_list_a_device_leaves_the_node_on_the_cpu_with_the_reason(
        make_manager: Callable[..., InstanceManager], tmp_path: Path, model_file: Path,
        module: dict[str, object], words: str) -> None:
    write_fake_build(tmp_path / "runtimes", {"vulkan": module})
    manager = make_manager(None, runtime_roots=[tmp_path / "runtimes"])
    offered = await _offered(manager)
    assert not offered[Backend.VULKAN].available and words in (offered[Backend.VULKAN].reason or "")
    await manager.start(make_spec(model_file, backend="vulkan"))  # asked for outright: still falls back
    assert await _ready_or_failed(manager) is READY
    assert manager.info("m").backend == "cpu"
    assert "[mirbadllm] backend: CPU (node choice: vulkan); not Vulkan: " in _log(manager)
    assert words in _log(manager)


async def test_a_gpu_module_that_crashes_at_load_is_failed_and_the_next_start_runs_on_the_cpu(
        make_manager: Callable[..., InstanceManager], tmp_path: Path, model_file: Path) -> None:
    write_fake_build(tmp_path / "runtimes", {"vulkan": {**GPU, "load": "crash"}})
    manager = make_manager(None, runtime_roots=[tmp_path / "runtimes"])
    await manager.start(make_spec(model_file))
    assert await _ready_or_failed(manager) is FAILED
    assert "SIGSEGV" in (manager.info("m").error or "")
    offered = await _offered(manager)
    assert not offered[Backend.VULKAN].available
    assert offered[Backend.VULKAN].reason == "llama-server was killed by SIGSEGV on its first start with Vulkan"
    await manager.stop("m")
    await manager.start(make_spec(model_file))
    assert await _ready_or_failed(manager) is READY
    assert manager.info("m").backend == "cpu"


async def test_a_gpu_module_that_offloads_nothing_does_not_count_as_working(
        make_manager: Callable[..., InstanceManager], tmp_path: Path, model_file: Path) -> None:
    write_fake_build(tmp_path / "runtimes", {"vulkan": {**GPU, "load": "no_offload"}})
    manager = make_manager(None, runtime_roots=[tmp_path / "runtimes"])
    await manager.start(make_spec(model_file))
    assert await _ready_or_failed(manager) is READY  # the first start's check runs before "ready"
    state = (await _offered(manager))[Backend.VULKAN]
    assert not state.available and state.reason == "it loaded with Vulkan but offloaded no layers"


def test_the_spec_s_gpus_are_named_as_the_backend_it_runs_on_names_them(model_file: Path) -> None:
    from agent.runtimes.llamacpp import build_command

    spec = make_spec(model_file, settings={"gpus": [0, 1]})

    def device(backend: Backend | None) -> str:
        argv = build_command(spec, 20000, backend=backend)
        return argv[argv.index("--device") + 1]

    assert device(Backend.CUDA) == device(None) == "CUDA0,CUDA1"  # an unknown build: as NVML numbers them
    assert device(Backend.VULKAN) == "Vulkan0,Vulkan1"
    assert device(Backend.METAL) == "MTL0,MTL1"
    assert device(Backend.CPU) == "none"  # no GPU to name: a CPU run offloads nothing


def test_without_nvml_the_gpus_are_the_ones_the_build_lists_and_lavapipe_is_the_system_s_memory() -> None:
    from agent.admission import AdmissionPolicy, is_unified
    from agent.gpu import RuntimeListedProbe
    from tests.fakes import FakeGpuProbe

    listed = [("Vulkan0", "AMD Radeon RX 7600 (RADV NAVI33)", 8176, 8000)]
    radeon = RuntimeListedProbe(FakeGpuProbe([]), lambda: listed).sample()
    assert [(g.index, g.name, g.memory_total >> 20, g.memory_used >> 20, g.unified_memory) for g in radeon] == [
        (0, "AMD Radeon RX 7600 (RADV NAVI33)", 8176, 176, False)]
    assert not is_unified(radeon, AdmissionPolicy())
    lavapipe = RuntimeListedProbe(FakeGpuProbe([]), lambda: [("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)",
                                                                  24105, 23693)]).sample()
    assert lavapipe[0].unified_memory and is_unified(lavapipe, AdmissionPolicy())
    nvidia = FakeGpuProbe([radeon[0].model_copy(update={"name": "NVIDIA GeForce RTX 4090"})])
    assert [g.name for g in RuntimeListedProbe(nvidia, lambda: listed).sample()] == ["NVIDIA GeForce RTX 4090"]


def test_only_a_failure_in_the_gpu_fails_the_gpu_backend() -> None:
    from agent.runtimes.llamacpp import gpu_failure

    assert gpu_failure(-11, ["llama_model_load: loading tensors"])  # a crash, whatever it said
    assert gpu_failure(1, ["ggml_vulkan: Device memory allocation of size 1073741824 failed."])
    assert gpu_failure(1, ["CUDA error: no kernel image is available for execution on the device"])
    assert not gpu_failure(1, [("llama_model_load: error loading model: tensor 'token_embd.weight' data is not "
                               "within the file bounds")])  # a bad model file fails on the CPU too
    assert not gpu_failure(0, []) and not gpu_failure(None, ["vulkan"])
