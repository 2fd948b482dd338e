"""The search space, the plan, the suite's sizes and figures: pure functions with exact values."""

from __future__ import annotations

import pytest

from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import GpuInfo, InstanceSample, TelemetrySample
from daemon.api.jobs import SuiteOptions
from daemon.jobs.benchmark import level_metrics, plan_suite, with_roles
from daemon.jobs.calls import ChatTiming
from daemon.jobs.instances import is_tune_instance, job_instances, tune_instance_id
from daemon.jobs.load import other_models_busy, outside_load
from daemon.jobs.planner import (
    DIMENSIONS,
    Machine,
    count_candidates,
    dimensions_for,
    effective_config,
    estimate_eta,
    pace_from_history,
)
from daemon.jobs.presets import preset
from daemon.jobs.store import JobStore, job_id, split_job_id
from daemon.models.maintenance import MaintenanceWindow

CPU2 = Machine(cpu_count=2, has_gpu=False)


def labels(dim: str, best: LlamaCppSettings, machine: Machine = CPU2, override: list[object] | None = None) -> list[str]:
    return [label for label, _ in DIMENSIONS[dim].variants(best, machine, override)]


def test_quick_and_full_searches_and_gpu_layers_only_with_a_gpu() -> None:
    assert dimensions_for("quick", None, CPU2) == ["threads", "parallel", "flash_attn"]
    assert dimensions_for("full", None, CPU2) == ["threads", "batch", "parallel", "flash_attn", "cache_type"]
    assert dimensions_for("full", None, Machine(8, True))[-1] == "n_gpu_layers"
    assert dimensions_for("quick", ["flash_attn", "threads"], CPU2) == ["flash_attn", "threads"]
    with pytest.raises(ValueError, match="unknown tuning dimension"):
        dimensions_for("quick", ["warp_drive"], CPU2)


def test_thread_counts_follow_the_cores_and_skip_the_current_value() -> None:
    assert labels("threads", LlamaCppSettings()) == ["threads=1", "threads=2"]
    assert labels("threads", LlamaCppSettings(threads=2)) == ["threads=1"]
    assert labels("threads", LlamaCppSettings(), Machine(16, False)) == ["threads=4", "threads=8", "threads=16"]
    assert labels("threads", LlamaCppSettings(), override=[1, 3]) == ["threads=1", "threads=3"]


def test_parallel_slots_keep_the_total_context_and_room_for_the_longest_prompt() -> None:
    best = LlamaCppSettings(ctx_size=4096, parallel=2)
    assert labels("parallel", best, Machine(2, False, min_slot_ctx=1500)) == ["parallel=1"]
    assert labels("parallel", best) == ["parallel=1", "parallel=4", "parallel=8", "parallel=16"]
    candidate = DIMENSIONS["parallel"].variants(best, CPU2)[0][1]
    assert (candidate.ctx_size, candidate.parallel) == (4096, 1)


def test_a_quantised_v_cache_only_with_flash_attention_on() -> None:
    assert labels("cache_type", LlamaCppSettings(flash_attn="on")) == ["cache_type_k=q8_0, cache_type_v=q8_0"]
    assert labels("cache_type", LlamaCppSettings()) == ["cache_type_k=q8_0, cache_type_v=default"]
    assert labels("n_gpu_layers", LlamaCppSettings()) == []
    assert labels("n_gpu_layers", LlamaCppSettings(), Machine(8, True)) == ["n_gpu_layers=0", "n_gpu_layers=999"]


def test_effective_config_and_counts_and_eta() -> None:
    assert effective_config(LlamaCppSettings(threads=2, flash_attn="on")) == "threads=2 flash_attn=on"
    assert effective_config(LlamaCppSettings()) == "runtime defaults"
    saved = LlamaCppSettings(ctx_size=8192, parallel=4)
    assert count_candidates(["threads", "parallel", "flash_attn"], saved, CPU2, {}, 40) == 2 + 4 + 2
    assert count_candidates(["threads", "parallel"], saved, CPU2, {}, 3) == 3
    assert estimate_eta(5, 3, 10.0, 60.0, 3, 5) == 680.0
    assert pace_from_history([], [], None) == (15.0, 60.0)
    assert pace_from_history([], [], 42.0) == (15.0, 42.0)
    assert pace_from_history([4.0, 6.0, 5.0], [30.0, 40.0, 20.0], 99.0) == (5.0, 30.0)


def test_the_suite_is_capped_by_the_slots_and_the_context_per_slot() -> None:
    options = SuiteOptions(levels=[1, 4, 8, 16], long_prompt_tokens=4096)
    plan = plan_suite(preset("interactive"), options, slots=4, ctx_per_slot=2048)
    assert plan.levels == (1, 4) and plan.max_level is None
    assert plan.long_tokens == int((2048 - 64) * 0.8) and plan.longest_tokens is None
    assert (plan.objective_questions, plan.tool_cases, plan.repetitions) == (8, 3, 3)
    throughput = plan_suite(preset("throughput"), options, slots=6, ctx_per_slot=None)
    assert throughput.levels == (1, 4, 6) and throughput.max_level == 6 and throughput.long_tokens is None
    documents = plan_suite(preset("long-documents"), SuiteOptions(long_prompt_tokens=1000), 1, 32768)
    assert (documents.long_tokens, documents.longest_tokens) == (1000, int((32768 - 64) * 0.8))
    embeddings = plan_suite(preset("embeddings"), options, slots=16, ctx_per_slot=512)
    assert (embeddings.long_tokens, embeddings.tool_cases, embeddings.objective_questions) == (None, 0, 0)


def _timing(ttft: float, total: float, tokens: int) -> ChatTiming:
    return ChatTiming(ok=True, ttft_s=ttft, total_s=total, completion_tokens=tokens)


def test_level_figures_per_request_aggregate_and_ttft_percentiles() -> None:
    timings = [_timing(0.1, 1.1, 10), _timing(0.2, 2.2, 10), _timing(0.3, 0.8, 10), ChatTiming(ok=False, error="x")]
    figures = level_metrics(4, timings, wall_s=2.5)
    assert figures == {"n4_requests": 4.0, "n4_errors": 1.0, "n4_tps": 10.0, "n4_tokens": 30.0, "n4_agg_tps": 12.0,
                       "n4_ttft_p50_ms": 200.0, "n4_ttft_p95_ms": 300.0}


def test_roles_alias_the_levels_a_preset_scores() -> None:
    plan = plan_suite(preset("throughput"), SuiteOptions(levels=[1, 4]), slots=8, ctx_per_slot=None)
    metrics = {"n1_tps": 5.0, "n1_requests": 1.0, "n1_errors": 0.0, "n4_agg_tps": 30.0, "n4_requests": 4.0,
               "n4_errors": 1.0, "n8_agg_tps": 50.0, "n8_requests": 8.0, "n8_errors": 0.0}
    roles = with_roles(metrics, plan)
    assert (roles["single_tps"], roles["top_agg_tps"], roles["max_agg_tps"]) == (5.0, 30.0, 50.0)
    assert roles["error_rate"] == pytest.approx(1 / 13)


def test_tuning_instance_ids_fit_the_pattern() -> None:
    assert tune_instance_id("gemma-3-270m", 3) == "gemma-3-270m-tune-3"
    long_id = tune_instance_id("m" * 40, 12)
    assert len(long_id) == 40 and long_id.endswith("-tune-12")
    assert is_tune_instance("gemma-tune-3") and not is_tune_instance("gemma-tune") and not is_tune_instance("tune-3x")
    ids = ["gemma", "gemma-tune-1", "gemma-tune-12", "gemma-2", "other-tune-1"]
    assert job_instances("gemma", ids) == {"gemma", "gemma-tune-1", "gemma-tune-12"}


def test_maintenance_retry_after_counts_down_from_the_estimate() -> None:
    window = MaintenanceWindow("benchmark.m.1", "benchmark", "m", until=100.0)
    assert window.retry_after_s(now=40.2) == 60
    assert window.retry_after_s(now=120.0) == 1


def test_job_ids_and_stamps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert split_job_id(job_id("tune", "gemma", "20260101T000000Z")) == ("tune", "gemma", "20260101T000000Z")
    with pytest.raises(ValueError):
        split_job_id("nonsense")
    store = JobStore(tmp_path)
    first = store.new_stamp("benchmark", "m", now=0.0)
    assert first == "19700101T000000Z"
    (tmp_path / "benchmarks" / "m").mkdir(parents=True)
    (tmp_path / "benchmarks" / "m" / f"{first}.json").write_text("{}")
    assert store.new_stamp("benchmark", "m", now=0.0) == "19700101T000000Z-2"


def test_load_flags_name_the_other_models_and_outside_cpu_and_gpu() -> None:
    sample = TelemetrySample(seq=1, ts=1.0, cpu_percent=60.0, memory_total=1, memory_used=1, memory_available=0,
                             gpus=[GpuInfo(index=0, name="g", utilization_percent=35.0)],
                             instances={"m": InstanceSample(cpu_percent=40.0),
                                        "other": InstanceSample(requests_processing=1.0, cpu_percent=0.0)})
    assert other_models_busy(sample, {"m"}) == ["noisy: other models busy (other)"]
    assert outside_load(sample, cpu_count=2) == ["noisy: CPU 40 % busy with work outside MirbadLLM"]
    idle = sample.model_copy(update={"cpu_percent": 10.0, "instances": {"m": InstanceSample()}})
    assert outside_load(idle, cpu_count=2) == ["noisy: GPU 0 35 % busy with work outside MirbadLLM"]
