"""A benchmark records the settings the instance really ran with, read back by its runtime's rules."""

from __future__ import annotations

from typing import Any

from agent.api.llamacpp import LlamaCppSettings, build_args
from agent.api.vllm import VllmSettings
from agent.api.vllm import build_args as vllm_args
from daemon.api.jobs import BenchmarkResult
from daemon.api.models import ModelDefinition
from daemon.jobs.runs import read_back


def definition(**fields: Any) -> ModelDefinition:
    return ModelDefinition.model_validate({"id": "q", "served_name": "q", "model_path": "/m/q", **fields})


def test_a_vllm_instance_is_read_back_from_its_container_cmd() -> None:
    saved = definition(runtime="vllm", vllm=VllmSettings(max_num_seqs=4), image="vllm/vllm-openai:test")
    ran = VllmSettings(max_model_len=8192, max_num_seqs=16, enable_prefix_caching=True)
    cmd = vllm_args(ran, "q", "q", ["--seed", "7"], 24.0, 80.0)
    back = read_back(saved, cmd)
    assert back.vllm is not None
    assert (back.vllm.max_model_len, back.vllm.max_num_seqs, back.vllm.enable_prefix_caching) == (8192, 16, True)
    assert back.extra_args == ["--seed", "7"]
    assert back.gpu_memory_utilization == 0.3
    assert back.settings == LlamaCppSettings()  # not llama.cpp's parse of vLLM's flags
    # No Cmd to read: the definition's settings, said as such.
    assert read_back(saved, []).vllm == VllmSettings(max_num_seqs=4)
    assert read_back(saved, []).gpu_memory_utilization is None


def test_a_llamacpp_instance_is_read_back_as_before() -> None:
    saved = definition(settings=LlamaCppSettings(ctx_size=2048))
    argv = ["/bin/llama-server", *build_args(LlamaCppSettings(ctx_size=8192, parallel=2), "/m/q", "q", 18000)]
    back = read_back(saved, argv)
    assert (back.settings.ctx_size, back.settings.parallel) == (8192, 2)
    assert back.vllm is None and back.gpu_memory_utilization is None
    assert read_back(saved, []).settings.ctx_size == 2048


def test_the_result_carries_the_vllm_settings_and_old_results_still_load() -> None:
    result = BenchmarkResult(model="q", stamp="s", started_at=0.0, runtime="vllm",
                             vllm=VllmSettings(max_num_seqs=16), gpu_memory_utilization=0.3)
    again = BenchmarkResult.model_validate_json(result.model_dump_json())
    assert again.runtime == "vllm" and again.vllm == VllmSettings(max_num_seqs=16)
    assert again.gpu_memory_utilization == 0.3
    old = BenchmarkResult.model_validate({"model": "q", "stamp": "s", "started_at": 0.0})
    assert old.runtime == "llamacpp" and old.vllm is None and old.extra_args == []
