"""Placement by GPU: the llama-server argv (golden), the environment, admission's per-GPU budgets,
and ``/agent/v1/plan`` on an agent with fake GPUs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.api.client import AgentError
from agent.api.llamacpp import (
    LlamaCppSettings,
    build_args,
    config_hash,
    gpu_env,
    lift_extra_args,
    parse_args,
)
from agent.api.models import GpuInfo, InstanceState
from agent.api.sources import FitRequest
from tests.agent._sources_support import sources_agent
from tests.agent._support import make_spec
from tests.fakes import FakeGpuProbe
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf

HEAD = ["--model", "/m/a.gguf", "--alias", "a", "--host", "127.0.0.1", "--port", "8080", "--jinja"]
TAIL = ["--metrics", "--slots", "--no-webui"]
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}
MIB = 1 << 20


def _argv(**settings: object) -> list[str]:
    return build_args(LlamaCppSettings.model_validate(settings), "/m/a.gguf", "a", 8080)


def test_gpu_settings_become_llama_servers_flags_in_a_fixed_order() -> None:
    assert _argv(gpus=[1], n_gpu_layers=99) == HEAD[:8] + ["--n-gpu-layers", "99", "--jinja",
                                                          "--device", "CUDA1"] + TAIL
    assert _argv(gpus=[0, 2], split_mode="layer", tensor_split="3,1", main_gpu=1) == HEAD + [
        "--device", "CUDA0,CUDA2", "--split-mode", "layer", "--tensor-split", "3,1", "--main-gpu", "1"] + TAIL
    assert _argv(gpus=[]) == HEAD + ["--device", "none"] + TAIL
    assert _argv(split_mode="none", main_gpu=0) == HEAD + ["--split-mode", "none", "--main-gpu", "0"] + TAIL
    assert _argv() == HEAD + TAIL  # unset: llama-server's own defaults (every GPU, split by free memory)


def test_the_gpu_flags_read_back_into_the_same_settings() -> None:
    settings = LlamaCppSettings(gpus=[0, 3], split_mode="row", tensor_split="1.5,1", main_gpu=1)
    assert parse_args(["llama-server", *build_args(settings, "/m/a.gguf", "a", 8080)]).settings == settings
    lifted, rest = lift_extra_args(LlamaCppSettings(), ["-dev", "CUDA2", "-ts", "2,1", "-sm", "layer", "-mg", "1"])
    assert (lifted.gpus, lifted.tensor_split, lifted.split_mode, lifted.main_gpu, rest) == ([2], "2,1", "layer", 1, [])
    lifted, rest = lift_extra_args(LlamaCppSettings(), ["--device=none"])
    assert (lifted.gpus, rest) == ([], [])


def test_another_backends_device_names_stay_as_typed() -> None:
    lifted, rest = lift_extra_args(LlamaCppSettings(), ["--device", "Vulkan0,Vulkan1", "--device=MTL0"])
    assert lifted.gpus is None and rest == ["--device", "Vulkan0,Vulkan1", "--device=MTL0"]
    assert build_args(LlamaCppSettings(), "/m/a.gguf", "a", 8080, ["--device", "Vulkan0"])[-2:] == ["--device",
                                                                                                  "Vulkan0"]


def test_a_bad_gpu_setting_is_refused_and_a_placement_changes_the_config_hash() -> None:
    for bad in ({"tensor_split": "3;1"}, {"tensor_split": "-1,1"}, {"gpus": [-1]}, {"main_gpu": 64}):
        with pytest.raises(ValueError):
            LlamaCppSettings.model_validate(bad)
    plain = config_hash(LlamaCppSettings(), "/m/a.gguf", "a")
    assert config_hash(LlamaCppSettings(gpus=[0]), "/m/a.gguf", "a") != plain
    assert config_hash(LlamaCppSettings(gpus=[1]), "/m/a.gguf", "a") != config_hash(
        LlamaCppSettings(gpus=[0]), "/m/a.gguf", "a")


def test_named_gpus_number_cuda_devices_in_pci_bus_order_as_nvml_does() -> None:
    assert gpu_env(LlamaCppSettings(gpus=[1])) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert gpu_env(LlamaCppSettings()) == gpu_env(LlamaCppSettings(gpus=[])) == {}


async def _refusal(call: object) -> AgentError:
    with pytest.raises(AgentError) as caught:
        await call  # type: ignore[misc]
    return caught.value


def _two_gpus() -> FakeGpuProbe:
    return FakeGpuProbe([GpuInfo(index=0, name="Roomy", memory_total=80 * GiB, memory_used=GiB),
                         GpuInfo(index=1, name="Busy", memory_total=24 * GiB, memory_used=22 * GiB)])


async def test_admission_holds_a_start_to_the_budget_of_the_gpus_it_names(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    memory = FakeMemoryProbe(total=256 * GiB, available=200 * GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, gpu_probe=_two_gpus(), memory_probe=memory) as agent:
        on_busy = LlamaCppSettings(ctx_size=32768, n_gpu_layers=-1, gpus=[1])
        error = await _refusal(agent.client.start(make_spec(model, "big", settings=on_busy)))
        assert error.code == "insufficient_memory" and "GPU 1 needs" in error.message and "GPU 0" not in error.message
        assert error.details["gpu_budget_bytes"] == [79 * GiB - 512 * MIB, 2 * GiB - 512 * MIB]
        report = await agent.client.fit(FitRequest(model_path=str(model), settings=on_busy))
        assert report.gpus[0].needed_bytes == 0 and report.gpus[1].needed_bytes > report.gpus[1].budget_bytes
        on_roomy = on_busy.model_copy(update={"gpus": [0]})
        started = await agent.client.start(make_spec(model, "big", settings=on_roomy))
        assert started.state is InstanceState.STARTING and "--device" in started.argv
        assert started.argv[started.argv.index("--device") + 1] == "CUDA0"
        await agent.client.stop("big", timeout=5)
        main_busy = LlamaCppSettings(ctx_size=32768, n_gpu_layers=-1, split_mode="none", main_gpu=1)
        assert (await _refusal(agent.client.start(make_spec(model, "big", settings=main_busy)))).code == \
            "insufficient_memory"
        error = await _refusal(agent.client.start(make_spec(model, "big", settings=LlamaCppSettings(gpus=[7]))))
        assert (error.status, error.code) == (422, "unknown_gpu") and "GPU 7" in error.message


async def test_the_agent_plans_each_gpu_a_split_and_the_cpu(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    memory = FakeMemoryProbe(total=256 * GiB, available=200 * GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, gpu_probe=_two_gpus(), memory_probe=memory) as agent:
        plan = await agent.client.plan(FitRequest(model_path=str(model)))
        assert plan.summary.block_count == 32 and plan.source == str(model) and plan.memory_total == 256 * GiB
        kinds = [(o.kind, o.gpus, o.state) for o in plan.options]
        assert kinds[0] == ("gpu", [0], "free") and ("cpu", [], "free") in kinds
        assert ("split", [0, 1], "free") in kinds
        busy = next(o for o in plan.options if o.kind == "gpu" and o.gpus == [1])
        assert 0 < busy.max_ctx_size < busy.max_ctx_size_empty == 32768  # a small context fits beside the rest
        assert busy.ctx_size == busy.settings.ctx_size == busy.max_ctx_size
        assert plan.options[0].devices[1].free_bytes == 79 * GiB - 512 * MIB
        asked = await agent.client.plan(FitRequest(model_path=str(model), settings=LlamaCppSettings(ctx_size=4096)))
        assert {o.ctx_size for o in asked.options} == {4096}
        error = await _refusal(agent.client.plan(FitRequest()))
        assert error.status == 422


async def test_named_gpus_on_unified_memory_are_held_to_system_memory(
        tmp_path: Path, fake_runtime: Callable[..., Path], port_base: int) -> None:
    model = write_gguf(tmp_path / "models" / "big.gguf", **BIG)
    gb10 = FakeGpuProbe([GpuInfo(index=0, name="NVIDIA GB10", memory_total=120 * GiB, memory_used=GiB)])
    memory = FakeMemoryProbe(total=128 * GiB, available=100 * GiB)
    async with sources_agent(tmp_path, fake_runtime(), port_base, gpu_probe=gb10, memory_probe=memory) as agent:
        report = await agent.client.fit(FitRequest(model_path=str(model), settings=LlamaCppSettings(gpus=[0])))
        assert report.unified_memory is True and report.gpus == [] and report.fits is True
        plan = await agent.client.plan(FitRequest(model_path=str(model)))
        assert [(o.kind, o.state) for o in plan.options] == [("unified", "free")] and plan.unified_memory is True
