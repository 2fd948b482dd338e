"""vLLM's argv: the builder's exact output, the normalizer's lifts, the Cmd parser and the hash."""

from __future__ import annotations

import json

import pytest

from agent.api.vllm import (
    CompilationSettings,
    SpeculativeSettings,
    VllmSettings,
    build_args,
    config_hash,
    normalize,
    parse_cmd,
)

TAIL = ["--disable-access-log-for-endpoints", "/health,/metrics"]


def full_settings() -> VllmSettings:
    return VllmSettings(
        quantization="fp8", kv_cache_dtype="fp8", max_model_len=32768, max_num_seqs=16,
        max_num_batched_tokens=8192, tool_call_parser="hermes", reasoning_parser="qwen3",
        enable_prefix_caching=False,
        speculative=SpeculativeSettings(method="mtp", num_speculative_tokens=2, extra={"draft_tensor_parallel_size": 1}),
        compilation=CompilationSettings(cudagraph_mode="FULL_AND_PIECEWISE", extra={"max_capture_size": 64}),
        async_scheduling=True, mamba_cache_mode="align", tensor_parallel_size=2)


# --- build_args: golden command lines ---------------------------------------------------------

def test_bare_settings_emit_only_what_the_driver_owns() -> None:
    assert build_args(VllmSettings(), "org/model", "m") == [
        "--model", "/models/org/model", "--served-model-name", "m", *TAIL]


def test_every_setting_in_the_canonical_order() -> None:
    argv = build_args(full_settings(), "org/model", "ornith", ["--seed", "7"], 60.0, 120.0)
    assert argv == [
        "--model", "/models/org/model", "--served-model-name", "ornith",
        "--quantization", "fp8", "--kv-cache-dtype", "fp8", "--max-model-len", "32768",
        "--max-num-seqs", "16", "--max-num-batched-tokens", "8192", "--tensor-parallel-size", "2",
        "--gpu-memory-utilization", "0.5000",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        "--reasoning-parser", "qwen3",
        "--no-enable-prefix-caching",
        "--speculative-config", '{"draft_tensor_parallel_size":1,"method":"mtp","num_speculative_tokens":2}',
        "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE","max_capture_size":64}',
        "--async-scheduling",
        "--mamba-cache-mode", "align",
        *TAIL, "--seed", "7"]


def test_tri_states_emit_on_off_or_nothing() -> None:
    on = build_args(VllmSettings(enable_prefix_caching=True, async_scheduling=False), "m", "m")
    assert on == ["--model", "/models/m", "--served-model-name", "m",
                  "--enable-prefix-caching", "--no-async-scheduling", *TAIL]


def test_memory_share_has_four_decimals_and_needs_both_numbers() -> None:
    assert build_args(VllmSettings(), "m", "m", [], 100.0, 139.8)[4:6] == ["--gpu-memory-utilization", "0.7153"]
    assert "--gpu-memory-utilization" not in build_args(VllmSettings(), "m", "m", [], 100.0, None)
    with pytest.raises(ValueError, match="does not fit"):
        build_args(VllmSettings(), "m", "m", [], 150.0, 139.8)


def test_extra_args_come_last_and_owned_flags_are_not_passed_twice() -> None:
    argv = build_args(VllmSettings(max_num_seqs=8), "m", "m", ["--max-num-seqs", "32", "--enforce-eager",
                                                               "--model", "/elsewhere", "--port=9"])
    assert argv == ["--model", "/models/m", "--served-model-name", "m", "--max-num-seqs", "32", *TAIL,
                    "--enforce-eager"]


@pytest.mark.parametrize("path", ["/etc/model", "../x", "a/../b", "", "a//b", "/models/../etc"])
def test_a_model_path_outside_the_mount_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="inside the models mount"):
        build_args(VllmSettings(), path, "m")


def test_a_path_already_in_the_mount_is_kept() -> None:
    assert build_args(VllmSettings(), "/models/org/m", "m")[:2] == ["--model", "/models/org/m"]


# --- normalize: every spelling lifts -------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--max-num-seqs", "12"], ["--max-num-seqs=12"], ["--max_num_seqs", "12"], ["--max_num_seqs=12"],
    ["--max-num-seqs 12"],
])
def test_a_scalar_in_any_spelling_replaces_the_typed_value(args: list[str]) -> None:
    settings, rest = normalize(VllmSettings(max_num_seqs=4), [*args, "--enforce-eager"])
    assert settings.max_num_seqs == 12
    assert rest == ["--enforce-eager"]


def test_the_last_scalar_wins() -> None:
    settings, _ = normalize(VllmSettings(), ["--kv-cache-dtype", "auto", "--kv_cache_dtype=fp8_e5m2"])
    assert settings.kv_cache_dtype == "fp8_e5m2"


def test_short_names_and_readable_numbers() -> None:
    settings, rest = normalize(VllmSettings(), ["-q", "awq", "-tp", "4", "--max-model-len", "32k",
                                                "--max-num-batched-tokens=16K"])
    assert (settings.quantization, settings.tensor_parallel_size) == ("awq", 4)
    assert (settings.max_model_len, settings.max_num_batched_tokens) == (32000, 16384)
    assert rest == []


def test_parsers_and_mamba_mode_lift() -> None:
    settings, rest = normalize(VllmSettings(), ["--tool-call-parser", "hermes", "--enable-auto-tool-choice",
                                                "--reasoning_parser=deepseek_r1", "--mamba-cache-mode", "all"])
    assert (settings.tool_call_parser, settings.reasoning_parser, settings.mamba_cache_mode) == (
        "hermes", "deepseek_r1", "all")
    assert rest == []


@pytest.mark.parametrize(("args", "prefix", "asynchronous"), [
    (["--enable-prefix-caching"], True, None),
    (["--no-enable-prefix-caching"], False, None),
    (["--no_enable_prefix_caching", "--async_scheduling"], False, True),
    (["--async-scheduling", "--no-async-scheduling"], None, False),
])
def test_on_off_flags_lift(args: list[str], prefix: bool | None, asynchronous: bool | None) -> None:
    settings, rest = normalize(VllmSettings(), args)
    assert (settings.enable_prefix_caching, settings.async_scheduling) == (prefix, asynchronous)
    assert rest == []


def test_a_full_object_replaces_the_typed_one_and_keeps_every_key() -> None:
    typed = VllmSettings(speculative=SpeculativeSettings(method="mtp", num_speculative_tokens=3))
    settings, rest = normalize(typed, ["--speculative-config", '{"method": "ngram", "prompt_lookup_max": 4}'])
    assert settings.speculative == SpeculativeSettings(method="ngram", extra={"prompt_lookup_max": 4})
    assert rest == []


def test_the_last_full_object_wins() -> None:
    settings, _ = normalize(VllmSettings(), ['--speculative-config={"method":"mtp"}',
                                             '--speculative_config {"method":"eagle","model":"/models/d"}'])
    assert settings.speculative == SpeculativeSettings(method="eagle", model="/models/d")


def test_dotted_keys_alone_build_the_object_and_discard_every_full_one() -> None:
    typed = VllmSettings(speculative=SpeculativeSettings(method="mtp", num_speculative_tokens=1, extra={"x": 1}))
    settings, rest = normalize(typed, [
        "--speculative-config.num_speculative_tokens=3",
        '--speculative-config={"method":"ngram","prompt_lookup_max":4}',
        "--speculative_config.model", "/models/draft",
        "--speculative-config.num_speculative_tokens", "2",
        "--speculative-config.draft_tensor_parallel_size=1"])
    assert settings.speculative == SpeculativeSettings(num_speculative_tokens=2, model="/models/draft",
                                                       extra={"draft_tensor_parallel_size": 1})
    assert rest == []


def test_compilation_lifts_from_cc_dotted_and_json() -> None:
    settings, _ = normalize(VllmSettings(compilation=CompilationSettings(extra={"level": 3})),
                            ["-cc.cudagraph_mode=piecewise", "-cc.pass_config.enable_fusion=true"])
    assert settings.compilation == CompilationSettings(cudagraph_mode="PIECEWISE",
                                                       extra={"pass_config": {"enable_fusion": True}})
    settings, _ = normalize(VllmSettings(), ["-cc", '{"cudagraph_mode": "FULL", "max_capture_size": 8}'])
    assert settings.compilation == CompilationSettings(cudagraph_mode="FULL", extra={"max_capture_size": 8})
    settings, _ = normalize(VllmSettings(), ['--compilation_config={"level":3}'])
    assert settings.compilation == CompilationSettings(extra={"level": 3})


def test_an_empty_object_means_none() -> None:
    settings, _ = normalize(VllmSettings(speculative=SpeculativeSettings(method="mtp")), ["--speculative-config={}"])
    assert settings.speculative is None


def test_optimization_level_is_not_owned() -> None:
    settings, rest = normalize(VllmSettings(), ["-O3", "-O.cudagraph_mode=FULL", "-O", "2"])
    assert settings == VllmSettings()
    assert rest == ["-O3", "-O.cudagraph_mode=FULL", "-O", "2"]


def test_normalize_is_idempotent() -> None:
    once = normalize(full_settings(), ["--max-num-seqs=3", "-cc.cudagraph_mode=NONE", "--enforce-eager"])
    assert normalize(*once) == once


@pytest.mark.parametrize(("args", "message"), [
    (["--max-num-seqs", "many"], "--max-num-seqs needs a positive whole number"),
    (["--max-num-seqs", "0"], "--max-num-seqs: Input should be greater than or equal to 1"),
    (["--max-model-len=1.5"], "--max-model-len needs a whole number"),
    (["--max-num-seqs"], "--max-num-seqs needs a value"),
    (["--kv-cache-dtype", "int3"], "--kv-cache-dtype: Input should be"),
    (["--speculative-config", "{nope"], "--speculative-config needs a JSON object"),
    (["--speculative-config", "[1]"], "--speculative-config needs a JSON object"),
    (["--speculative-config.num_speculative_tokens=lots"], "--speculative-config.num_speculative_tokens"),
    (["-cc.cudagraph_mode=SIDEWAYS"], "--compilation-config.cudagraph_mode"),
    (["--enable-prefix-caching=false"], "takes no value"),
    (["--speculative-config..x=1"], "empty key"),
])
def test_an_unreadable_owned_flag_is_refused_by_name(args: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("[", r"\[")):
        normalize(VllmSettings(), args)


# --- parse_cmd: a container's Cmd reads back ------------------------------------------------------

def test_parse_reads_back_what_build_wrote() -> None:
    extra = ["--max-num-seqs=3", "-cc.cudagraph_mode=NONE", "--enforce-eager", "--seed", "1"]
    argv = build_args(full_settings(), "org/model", "ornith", extra, 60.0, 120.0)
    settings, rest = normalize(full_settings(), extra)
    assert parse_cmd(argv) == (settings, "org/model", "ornith", rest)
    assert rest == ["--enforce-eager", "--seed", "1"]


def test_parse_accepts_the_entrypoint_and_a_positional_model() -> None:
    settings, model, served, rest = parse_cmd(["vllm", "serve", "/models/a/b", "--max-num-seqs", "4", "--x"])
    assert (settings.max_num_seqs, model, served, rest) == (4, "a/b", None, ["--x"])


# --- config_hash ----------------------------------------------------------------------------------

def test_an_unchanged_definition_keeps_its_hash() -> None:
    first = config_hash("vllm/vllm-openai:v0.11", full_settings(), "/srv/models/m", "m", ["--x"], 60.0)
    again = config_hash("vllm/vllm-openai:v0.11", full_settings().model_copy(deep=True), "/srv/models/m", "m",
                        ["--x"], 60.0, 120.0)
    assert first == again
    assert len(first) == 16 and int(first, 16) >= 0
    assert first == config_hash("vllm/vllm-openai:v0.11", full_settings(), "/srv/models/m", "m", ["--x"], 60.0, 80.0)


def test_equal_effective_configs_hash_equal() -> None:
    typed = config_hash("img", VllmSettings(max_num_seqs=8, enable_prefix_caching=False), "m", "m", [])
    lifted = config_hash("img", VllmSettings(), "m", "m", ["--max_num_seqs=8", "--no-enable-prefix-caching"])
    assert typed == lifted


@pytest.mark.parametrize("change", [
    {"image": "img:2"}, {"settings": VllmSettings(max_num_seqs=9)}, {"model_path": "n"},
    {"served_name": "n"}, {"extra_args": ["--enforce-eager"]}, {"memory_budget_gib": 61.0},
])
def test_any_change_changes_the_hash(change: dict[str, object]) -> None:
    base: dict[str, object] = {"image": "img", "settings": VllmSettings(max_num_seqs=8), "model_path": "m",
                               "served_name": "m", "extra_args": [], "memory_budget_gib": 60.0}
    assert config_hash(**base) != config_hash(**{**base, **change})  # type: ignore[arg-type]


def test_settings_schema_names_each_flag_for_the_editor() -> None:
    schema = VllmSettings.model_json_schema()
    flags = {name: prop.get("flag") for name, prop in schema["properties"].items()}
    assert flags["max_num_batched_tokens"] == "--max-num-batched-tokens"
    assert flags["speculative"] == "--speculative-config"
    assert all(flags.values()), flags
    assert json.dumps(schema)  # serializable for the app
