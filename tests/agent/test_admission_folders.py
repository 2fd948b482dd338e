"""Admission of model folders (vLLM, MLX): the weight files plus the margin, vLLM's GPU share.

Against ``Admission`` itself with a fake memory and GPU probe; the weight files are sparse (their
size is what counts, nothing is read).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.admission import Admission, AdmissionPolicy, folder_weights
from agent.api.models import GpuInfo, InstanceState, LaunchSpec
from agent.api.vllm import VllmSettings
from agent.memory_estimate import (
    FOLDER_MARGIN_MIN,
    folder_margin,
    folder_need,
    vllm_gpu_need,
)
from agent.problems import InsufficientMemory, InvalidModelFile, StartInProgress
from tests.fakes import FakeGpuProbe
from tests.fakes.fake_memory import FakeMemoryProbe, GiB

Loading = list[tuple[str, InstanceState, int | None]]


def folder(root: Path, name: str = "model", files: dict[str, int] | None = None, weights: int = 0) -> Path:
    """A model folder with sparse files of the given sizes (``weights``: one model.safetensors)."""
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text("{}")
    for file_name, size in {**({"model.safetensors": weights} if weights else {}), **(files or {})}.items():
        with open(path / file_name, "wb") as fh:
            fh.truncate(size)
    return path


def nothing_loading() -> Loading:
    return []


async def no_wait(predicate: Callable[[], bool], timeout: float) -> bool:
    return predicate()


def spec(path: Path, runtime: str, **kw: object) -> LaunchSpec:
    return LaunchSpec.model_validate({"instance_id": "m", "runtime": runtime, "model_path": str(path),
                                      "served_name": "m", **kw})


def admission(available: int = 12 * GiB, total: int = 16 * GiB, gpus: list[GpuInfo] | None = None,
              **policy: object) -> Admission:
    return Admission(AdmissionPolicy.model_validate(policy), FakeMemoryProbe(total=total, available=available),
                     FakeGpuProbe(list(gpus or [])))


def test_the_weights_are_the_weight_files() -> None:
    assert folder_margin(2 * GiB) == FOLDER_MARGIN_MIN  # at least 1 GiB
    assert folder_margin(10 * GiB) == 2 * GiB  # else a fifth
    assert folder_need(10 * GiB) == 12 * GiB
    assert vllm_gpu_need(80 * GiB, None) == 72 * GiB and vllm_gpu_need(80 * GiB, 24 * GiB) == 24 * GiB


def test_folder_weights_counts_the_weight_files_only(tmp_path: Path) -> None:
    path = folder(tmp_path, files={"model-00001-of-00002.safetensors": 3 * GiB,
                                   "model-00002-of-00002.safetensors": GiB, "weights.npz": 5,
                                   "pytorch_model.bin": 7, "tokenizer.json": 4 * GiB, "training_args.bin": 9})
    (path / "sub").mkdir()
    with open(path / "sub" / "x.gguf", "wb") as fh:
        fh.truncate(11)
    assert folder_weights(str(path)) == 4 * GiB + 5 + 7 + 11
    with pytest.raises(InvalidModelFile, match="holds no weight files"):
        folder_weights(str(folder(tmp_path, "empty")))
    with pytest.raises(InvalidModelFile, match="not a model folder"):
        folder_weights(str(tmp_path / "absent"))


async def test_mlx_weights_and_margin_against_available_memory(tmp_path: Path) -> None:
    fits = folder(tmp_path, "fits", weights=8 * GiB)  # 8 + 1.6 of 12 - 1 usable
    assert await admission().admit(spec(fits, "mlx"), nothing_loading, no_wait) is None
    big = folder(tmp_path, "big", weights=10 * GiB)  # 10 + 2 > 11
    with pytest.raises(InsufficientMemory) as refused:
        await admission().admit(spec(big, "mlx"), nothing_loading, no_wait)
    assert refused.value.details["needed_bytes"] == 12 * GiB
    assert refused.value.details["weights_bytes"] == 10 * GiB
    assert refused.value.details["available_bytes"] == 12 * GiB and refused.value.details["reserve_bytes"] == GiB
    assert "MLX" in str(refused.value) and "weights plus margin" in str(refused.value)
    await admission().admit(spec(big, "mlx", force=True), nothing_loading, no_wait)  # forced: started anyway
    with pytest.raises(InsufficientMemory, match="do not fit in its memory budget of 9.00 GiB"):
        await admission().admit(spec(big, "mlx", memory_budget_bytes=9 * GiB), nothing_loading, no_wait)
    with pytest.raises(InvalidModelFile, match="holds no weight files"):
        await admission().admit(spec(folder(tmp_path, "bare"), "mlx"), nothing_loading, no_wait)


async def test_mlx_waits_for_another_load(tmp_path: Path) -> None:
    path = folder(tmp_path, weights=GiB)

    def other_loading() -> Loading:
        return [("other", InstanceState.STARTING, None)]

    with pytest.raises(StartInProgress):
        await admission(unified_wait_s=0).admit(spec(path, "mlx"), other_loading, no_wait)


async def test_vllm_takes_its_share_of_each_gpu(tmp_path: Path) -> None:
    h100 = GpuInfo(index=0, name="NVIDIA H100", memory_total=80 * GiB, memory_used=GiB)
    path = folder(tmp_path, weights=16 * GiB)
    await admission(gpus=[h100]).admit(spec(path, "vllm"), nothing_loading, no_wait)  # 72 of 78.5
    busy = h100.model_copy(update={"memory_used": 20 * GiB})
    with pytest.raises(InsufficientMemory) as refused:
        await admission(gpus=[busy]).admit(spec(path, "vllm"), nothing_loading, no_wait)
    assert "GPU 0 needs 72.00 GiB (vLLM's default share (90 % of the GPU)) of 59.50 GiB usable" in str(refused.value)
    assert refused.value.details["gpu_needed_bytes"] == [72 * GiB]
    assert refused.value.details["gpu_budget_bytes"] == [int(59.5 * GiB)]
    assert "Give it a memory budget" in str(refused.value)
    # With a budget, that is what it takes: it shares the GPU.
    await admission(gpus=[busy]).admit(spec(path, "vllm", memory_budget_bytes=24 * GiB), nothing_loading, no_wait)
    # A budget the weights do not fit in leaves vLLM no KV cache: refused with both numbers.
    with pytest.raises(InsufficientMemory, match="do not fit in its memory budget of 16.00 GiB"):
        await admission(gpus=[busy]).admit(spec(path, "vllm", memory_budget_bytes=16 * GiB), nothing_loading,
                                           no_wait)


async def test_vllm_gpus_are_the_visible_or_tensor_parallel_ones(tmp_path: Path) -> None:
    free = GpuInfo(index=0, name="NVIDIA L40S", memory_total=48 * GiB, memory_used=0)
    full = GpuInfo(index=1, name="NVIDIA L40S", memory_total=48 * GiB, memory_used=40 * GiB)
    path = folder(tmp_path, weights=30 * GiB)
    budget = 40 * GiB
    await admission(gpus=[free, full]).admit(spec(path, "vllm", memory_budget_bytes=budget), nothing_loading, no_wait)
    with pytest.raises(InsufficientMemory, match="GPU 1 needs"):
        await admission(gpus=[free, full]).admit(
            spec(path, "vllm", memory_budget_bytes=budget, env={"CUDA_VISIBLE_DEVICES": "1"}), nothing_loading,
            no_wait)
    split = spec(path, "vllm", memory_budget_bytes=24 * GiB, vllm=VllmSettings(tensor_parallel_size=2))
    with pytest.raises(InsufficientMemory) as refused:  # GPU 1 has 7.5 GiB usable
        await admission(gpus=[free, full]).admit(split, nothing_loading, no_wait)
    assert refused.value.details["gpu_indices"] == [0, 1]
    assert refused.value.details["weights_per_gpu_bytes"] == 18 * GiB  # 15 + 3
    await admission(gpus=[free, free.model_copy(update={"index": 1})]).admit(split, nothing_loading, no_wait)
    with pytest.raises(InsufficientMemory, match="split over 2 GPUs"):
        await admission(gpus=[free]).admit(split, nothing_loading, no_wait)


async def test_vllm_on_a_gpu_node_waits_for_another_load(tmp_path: Path) -> None:
    gpu = GpuInfo(index=0, name="NVIDIA H100", memory_total=80 * GiB)
    path = folder(tmp_path, weights=GiB)

    def other_loading() -> Loading:
        return [("other", InstanceState.STARTING, None)]

    with pytest.raises(StartInProgress, match="GPU node"):
        await admission(gpus=[gpu], unified_wait_s=0).admit(spec(path, "vllm"), other_loading, no_wait)
    await admission(gpus=[gpu], unified_wait_s=0).admit(spec(path, "vllm", force=True), other_loading, no_wait)


async def test_vllm_without_a_gpu_and_on_unified_memory(tmp_path: Path) -> None:
    path = folder(tmp_path, weights=2 * GiB)  # 2 + 1 + 4 GiB of CPU KV cache
    await admission(available=12 * GiB).admit(spec(path, "vllm"), nothing_loading, no_wait)
    with pytest.raises(InsufficientMemory, match="4.00 GiB of CPU KV cache") as refused:
        await admission(available=7 * GiB).admit(spec(path, "vllm"), nothing_loading, no_wait)
    assert refused.value.details["needed_bytes"] == 7 * GiB
    await admission(available=7 * GiB).admit(spec(path, "vllm", env={"VLLM_CPU_KVCACHE_SPACE": "1"}),
                                             nothing_loading, no_wait)
    spark = GpuInfo(index=0, name="NVIDIA GB10", memory_total=120 * GiB)  # unified: vLLM's share of it
    with pytest.raises(InsufficientMemory) as refused:
        await admission(available=100 * GiB, total=128 * GiB, gpus=[spark]).admit(spec(path, "vllm"),
                                                                                  nothing_loading, no_wait)
    assert refused.value.details["needed_bytes"] == 108 * GiB
    await admission(available=100 * GiB, total=128 * GiB, gpus=[spark]).admit(
        spec(path, "vllm", memory_budget_bytes=40 * GiB), nothing_loading, no_wait)
