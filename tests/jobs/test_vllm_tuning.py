"""Tuning a vLLM model: its dimensions and gates, de-duplication, candidate launches and apply.

Units here (the planner, the space and apply), plus the plan and apply endpoints of a running
daemon with a vLLM model in its registry. A whole tuning run of a vLLM model needs the vLLM driver
against a Docker engine and is not run here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.api.models import AgentStatus, GpuInfo
from agent.api.vllm import SpeculativeSettings, VllmSettings, normalize
from agent.runtimes.vllm import LABEL_TUNING, create_body
from daemon.api.jobs import CandidateResult, TuneRequest, TuningResult
from daemon.api.models import ModelDefinition
from daemon.jobs.job import Job
from daemon.jobs.presets import preset
from daemon.jobs.scoring import median_metrics
from daemon.jobs.spaces import (
    VllmSpace,
    applied,
    embedding_model,
    outline,
    space_for,
    vllm_machine,
)
from daemon.jobs.store import job_id
from daemon.jobs.tuning import TuningRun
from daemon.jobs.vllm_dimensions import (
    VLLM_DIMENSIONS,
    ModelFacts,
    VllmMachine,
    facts_from_config,
    read_model_facts,
    vllm_dimensions_for,
)
from tests.daemon.harness import running_daemon

GIB = 2**30
CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 4, "num_attention_heads": 8,
          "num_key_value_heads": 2, "head_dim": 64, "torch_dtype": "bfloat16", "max_position_embeddings": 32768,
          "mtp_num_hidden_layers": 1}
SAVED = VllmSettings(max_model_len=8192, kv_cache_dtype="fp8", max_num_seqs=16, max_num_batched_tokens=6144)
STATUS = AgentStatus(node_id="local", hostname="h", os="linux", arch="x86_64", version="t", cpu_count=8,
                     memory_total=64 * GIB, memory_available=32 * GIB, gpus=[GpuInfo(index=0, name="H", memory_total=80 * GIB)])


def model_folder(tmp_path: Path, config: dict[str, Any] = CONFIG, weights: int = GIB) -> Path:
    folder = tmp_path / "qwen"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    with open(folder / "model.safetensors", "wb") as f:
        f.truncate(weights)  # sparse: its size is what counts
    return folder


def definition(path: str, budget: float | None = 3.0, **fields: Any) -> ModelDefinition:
    values: dict[str, Any] = {"id": "q", "served_name": "q", "runtime": "vllm", "model_path": path,
                              "vllm": SAVED, "memory_budget_gib": budget, "image": "vllm/vllm-openai:test", **fields}
    return ModelDefinition.model_validate(values)


def plan(space: VllmSpace, **request: Any) -> dict[str, list[str]]:
    return dict(outline(TuneRequest(model="q", **request), space, (10.0, 20.0)).steps)


def test_config_json_gives_mtp_layers_and_the_kv_bytes_per_token(tmp_path: Path) -> None:
    facts = read_model_facts(model_folder(tmp_path))
    assert facts.known and facts.mtp_layers == 1 and facts.max_position == 32768 and facts.weights_bytes == GIB
    assert facts.kv_bytes_per_token == 2 * 4 * 2 * 64 * 2  # K and V × layers × kv heads × head dim × bf16
    mla = facts_from_config({"num_hidden_layers": 2, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                             "torch_dtype": "bfloat16", "num_attention_heads": 16}, None)
    assert mla.kv_bytes_per_token == 2 * (512 + 64) * 2 and mla.mtp_layers == 0
    hybrid = facts_from_config({"hybrid_override_pattern": "M*M*", "num_hidden_layers": 4}, None)
    assert hybrid.mamba and not facts.mamba
    assert not read_model_facts(tmp_path / "missing").known and not read_model_facts(None).known


def test_a_full_plan_visits_every_phase_in_order_with_the_values_the_gates_admit(tmp_path: Path) -> None:
    space = space_for(definition(str(model_folder(tmp_path))), STATUS)
    assert isinstance(space, VllmSpace)
    steps = plan(space, search="full")
    assert list(steps) == ["kv_cache_dtype", "prefix_caching", "max_num_seqs", "max_num_batched_tokens",
                           "speculative", "async_scheduling"]
    assert steps["kv_cache_dtype"] == ["kv_cache_dtype=auto"]  # 1 GiB + 16 MiB of KV + reserve fits 3 GiB
    assert steps["prefix_caching"] == ["enable_prefix_caching=on", "enable_prefix_caching=off"]
    assert steps["max_num_seqs"] == ["max_num_seqs=4", "max_num_seqs=8", "max_num_seqs=32", "max_num_seqs=64"]
    assert steps["max_num_batched_tokens"] == [f"max_num_batched_tokens={n}" for n in (2048, 4096, 8192, 16384, 32768)]
    assert steps["speculative"] == ["speculative=mtp×1", "speculative=mtp×2", "speculative=mtp×3", "speculative=mtp×5"]
    assert steps["async_scheduling"] == ["async_scheduling=on", "async_scheduling=off"]
    outlined = outline(TuneRequest(model="q", search="full"), space, (10.0, 20.0))
    assert outlined.candidates == 1 + 1 + 2 + 4 + 5 + 4 + 2
    assert not any("MTP" in n for n in outlined.notes)
    assert all(VLLM_DIMENSIONS[d].goal and VLLM_DIMENSIONS[d].tradeoff for d in steps)


def test_quick_search_is_max_num_seqs_and_speculative_decoding(tmp_path: Path) -> None:
    space = space_for(definition(str(model_folder(tmp_path))), STATUS)
    assert list(plan(space)) == ["max_num_seqs", "speculative"]
    assert outline(TuneRequest(model="q"), space, (10.0, 20.0)).candidates == 1 + 4 + 4


def test_unknown_model_files_skip_mtp_and_kv_auto_and_say_why() -> None:
    space = space_for(definition("org/qwen"), STATUS)  # relative: the folder is the node's
    outlined = outline(TuneRequest(model="q", search="full"), space, (10.0, 20.0))
    steps = dict(outlined.steps)
    assert steps["kv_cache_dtype"] == [] and steps["speculative"] == []  # fp8 and off are the saved ones
    assert any(n.startswith("MTP depths are not tried: the model's config.json is not readable") for n in outlined.notes)
    assert any(n.startswith("KV cache auto is not tried: the memory it needs is not known") for n in outlined.notes)
    assert any(n.startswith("Draft-model depths are not tried: no draft model") for n in outlined.notes)


def test_a_saved_mtp_config_is_proof_enough_and_off_is_tried(tmp_path: Path) -> None:
    saved = SAVED.model_copy(update={"speculative": SpeculativeSettings(method="mtp", num_speculative_tokens=2)})
    space = space_for(definition("org/qwen", vllm=saved), STATUS)
    assert plan(space)["speculative"] == ["speculative=off", "speculative=mtp×1", "speculative=mtp×3",
                                          "speculative=mtp×5"]


def test_kv_auto_needs_a_budget_that_holds_one_full_length_request(tmp_path: Path) -> None:
    folder = str(model_folder(tmp_path))
    space = space_for(definition(folder, budget=2.5), STATUS)  # 1 GiB + 16 MiB + 1.5 GiB reserve > 2.5 GiB
    outlined = outline(TuneRequest(model="q", search="full"), space, (10.0, 20.0))
    assert dict(outlined.steps)["kv_cache_dtype"] == []
    assert "KV cache auto is not tried: 2.5 GiB does not hold the weights and one 8192-token request" in \
        " ".join(outlined.notes)
    # Without a budget of its own the model may use vLLM's default share of the GPU (0.9 × 80 GiB).
    assert dict(plan(space_for(definition(folder, budget=None), STATUS), search="full"))["kv_cache_dtype"] == \
        ["kv_cache_dtype=auto"]


def test_draft_depths_need_a_draft_model_and_its_block_size() -> None:
    draft = SpeculativeSettings(method="draft_model", model="/models/draft", num_speculative_tokens=4)
    machine = VllmMachine(saved=SAVED.model_copy(update={"speculative": draft}), facts=ModelFacts(known=True, mtp_layers=0))
    labels = [label for label, _ in VLLM_DIMENSIONS["speculative"].variants(machine.saved, machine)]
    assert labels == ["speculative=off"]
    _, notes = vllm_dimensions_for("quick", None, machine)
    assert any(n.startswith("Draft-model depths beyond the saved one are not tried") for n in notes)
    sized = VllmMachine(saved=machine.saved, facts=ModelFacts(known=True, mtp_layers=0, draft_block_size=8))
    variants = VLLM_DIMENSIONS["speculative"].variants(sized.saved, sized)
    assert [label for label, _ in variants] == ["speculative=off", "speculative=draft_model×3",
                                                 "speculative=draft_model×7"]
    assert all(s.speculative is None or s.speculative.model == "/models/draft" for _, s in variants)


def test_max_batched_tokens_keeps_the_saved_value_and_whole_prompts_without_chunked_prefill() -> None:
    dim = VLLM_DIMENSIONS["max_num_batched_tokens"]
    machine = VllmMachine(saved=SAVED)
    assert [v["max_num_batched_tokens"] for v in dim.values(SAVED, machine)] == [2048, 4096, 6144, 8192, 16384, 32768]
    whole = VllmMachine(saved=SAVED, chunked_prefill=False)
    assert [v["max_num_batched_tokens"] for v in dim.values(SAVED, whole)] == [6144, 8192, 16384, 32768]
    _, notes = vllm_dimensions_for("full", None, whole)
    assert "Chunked prefill is off: max batched tokens below max model len (8192) are not tried." in notes


def test_a_hybrid_pairs_prefix_caching_with_its_mamba_cache_mode() -> None:
    machine = VllmMachine(saved=SAVED, facts=ModelFacts(known=True, mamba=True))
    variants = VLLM_DIMENSIONS["prefix_caching"].variants(SAVED, machine)
    assert [(s.enable_prefix_caching, s.mamba_cache_mode) for _, s in variants] == [(True, "align"), (False, "none")]


def test_a_pooling_model_only_varies_num_seqs_and_batched_tokens() -> None:
    machine, _ = vllm_machine(definition("org/e5", extra_args=["--runner", "pooling"]), STATUS)
    dims, notes = vllm_dimensions_for("full", None, machine)
    assert dims == ["max_num_seqs", "max_num_batched_tokens"] and notes[0].startswith("A pooling model")
    assert embedding_model(definition("org/e5", extra_args=["--runner", "pooling"]))
    assert not embedding_model(definition("org/qwen"))


def test_llama_cpp_dimensions_are_refused_for_a_vllm_model_and_mlx_has_no_search() -> None:
    space = space_for(definition("org/qwen"), STATUS)
    with pytest.raises(ValueError, match="unknown tuning dimension"):
        space.dims(TuneRequest(model="q", dimensions=["threads"]))
    with pytest.raises(ValueError, match="not available for mlx"):
        space_for(definition("org/qwen", runtime="mlx"), STATUS)


def test_configurations_that_run_alike_are_one_candidate() -> None:
    # The saved settings are normalized first: a raw flag in extra_args is the baseline's own value.
    d = definition("org/qwen", vllm=VllmSettings(max_model_len=8192), extra_args=["--max-num-seqs=16", "--seed", "1"])
    space = space_for(d, STATUS)
    assert isinstance(space, VllmSpace) and space.rest == ["--seed", "1"]
    assert plan(space)["max_num_seqs"] == ["max_num_seqs=4", "max_num_seqs=8", "max_num_seqs=32", "max_num_seqs=64"]
    # kv auto is vLLM's default: no candidate, and the same fingerprint.
    saved = space.saved()
    assert space.variants("kv_cache_dtype", saved, ["auto", "fp8", "fp8"]) == \
        [("kv_cache_dtype=fp8", saved.model_copy(update={"kv_cache_dtype": "fp8"}))]
    assert space.fingerprint(saved.model_copy(update={"kv_cache_dtype": "auto"})) == space.fingerprint(saved)
    assert space.fingerprint(saved.model_copy(update={"max_num_seqs": 8})) != space.fingerprint(saved)


def test_candidates_launch_as_tuning_instances_with_the_budget_and_length_kept(tmp_path: Path) -> None:
    space = space_for(definition(str(model_folder(tmp_path)), extra_args=["--max-num-seqs", "16"]), STATUS)
    for dim in VLLM_DIMENSIONS:
        for _, settings in space.variants(dim, space.saved(), None):
            spec = space.spec("q-tune-1", settings)
            assert spec.runtime == "vllm" and spec.tuning and spec.vllm == settings
            assert spec.vllm.max_model_len == 8192 and spec.memory_budget_bytes == 3 * GIB
            assert spec.extra_args == [] and spec.image == "vllm/vllm-openai:test"
    body = create_body(space.spec("q-tune-1", space.saved()), "img", [], 20000, "k", "/m", "qwen", "h", False)
    assert body["Labels"][LABEL_TUNING] == "1"
    own = space.spec("q-tune-1", space.saved()).model_copy(update={"tuning": False})
    assert LABEL_TUNING not in create_body(own, "img", [], 20000, "k", "/m", "qwen", "h", False)["Labels"]


def tuning_run(space: VllmSpace) -> TuningRun:
    job = Job(id="tune.q.s", kind="tune", model="q", node="local", preset="interactive", stamp="s")
    return TuningRun(job, TuneRequest(model="q"), space.definition, access=None,  # type: ignore[arg-type]
                     space=space, preset=preset("interactive"), dims=[], publish=lambda: None,
                     watch=lambda: None, pace_hint=(1.0, 1.0))


def test_a_confirmed_vllm_winner_is_recorded_as_vllm_settings() -> None:
    space = space_for(definition("org/qwen"), STATUS)
    assert isinstance(space, VllmSpace)
    run = tuning_run(space)
    assert run.result.runtime == "vllm" and run.result.saved_vllm == SAVED
    fast = SAVED.model_copy(update={"max_num_seqs": 32})
    run.result.candidates = [run._candidate(SAVED, index=0, step="baseline"),
                             run._candidate(fast, index=1, step="max_num_seqs")]
    assert run.result.candidates[1].effective_config == ("kv_cache_dtype=fp8 max_model_len=8192 max_num_seqs=32 "
                                                         "max_num_batched_tokens=6144")

    def rep(single: list[float]) -> list[dict[str, float]]:
        return [{"single_tps": s, "top_agg_tps": 100.0, "long_ttft_ms": 500.0, "single_ttft_p95_ms": 200.0,
                 "top_ttft_p95_ms": 900.0, "error_rate": 0.0} for s in single]

    def conf(index: int, r: list[dict[str, float]]) -> tuple[CandidateResult, list[dict[str, float]]]:
        return CandidateResult(index=index, step="confirmation", metrics=median_metrics(r)), r

    run._decide({0: conf(0, rep([10.0, 10.2, 9.8])), 1: conf(1, rep([14.0, 14.5, 13.5]))})
    assert run.result.winner == 1 and run.result.winner_vllm == fast and run.result.winner_settings is None


def result_with(saved: VllmSettings, winner: VllmSettings) -> TuningResult:
    return TuningResult(model="q", stamp="20260101-000000", started_at=0.0, runtime="vllm", saved_vllm=saved,
                        winner=1, winner_vllm=winner)


def test_apply_writes_what_the_winner_changed_and_leaves_no_owned_flag_in_extra_args() -> None:
    saved, _ = normalize(SAVED, [])
    winner = saved.model_copy(update={"max_num_seqs": 32, "enable_prefix_caching": False})
    # Since the run, someone set a tool parser and left raw owned flags in extra_args.
    current = definition("org/qwen", vllm=SAVED.model_copy(update={"tool_call_parser": "hermes"}),
                         extra_args=["--max-num-seqs", "8", "--no-enable-prefix-caching", "--seed", "1",
                                     "--kv-cache-dtype=auto"])
    out = applied(current, result_with(saved, winner))
    assert out.extra_args == ["--seed", "1"]
    assert out.vllm.max_num_seqs == 32 and out.vllm.enable_prefix_caching is False
    assert out.vllm.tool_call_parser == "hermes"  # kept: the winner did not change it
    assert out.vllm.kv_cache_dtype == "auto"  # the raw flag's value, as vLLM ran it; not the winner's to change
    assert out.vllm.max_model_len == 8192 and out.memory_budget_gib == 3.0


async def test_the_plan_and_apply_endpoints_for_a_vllm_model(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    async with running_daemon(tmp_path / "home", None) as d:
        await d.daemon.registry.add(definition(str(folder)))
        shown = await d.client.plan_tune(TuneRequest(model="q", search="full"))
        assert [s.dimension for s in shown.steps][:2] == ["kv_cache_dtype", "prefix_caching"]
        assert next(s for s in shown.steps if s.dimension == "speculative").values[0] == "speculative=mtp×1"
        assert shown.candidates == 19 and shown.steps[0].goal.startswith("Store the KV cache")
        result = result_with(SAVED, SAVED.model_copy(update={"max_num_seqs": 64}))
        d.daemon.jobs.store.save(result)
        view = await d.client.apply_job(job_id("tune", "q", result.stamp), restart=False)
        assert view.definition.vllm.max_num_seqs == 64 and view.definition.vllm.max_model_len == 8192
        assert d.daemon.registry.require("q").vllm.max_num_seqs == 64
