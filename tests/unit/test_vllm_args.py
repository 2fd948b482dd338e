"""vLLM's argv: the builder's exact output, the normalizer's lifts, the Cmd parser and the hash."""

from __future__ import annotations

import json

import pytest

from agent.api.launch_policy import (
    PolicyViolation,
    check_env,
    check_extra_args,
    check_launch,
    check_vllm_settings,
)
from agent.api.vllm import (
    CompilationSettings,
    SpeculativeSettings,
    VllmSettings,
    build_args,
    config_hash,
    normalize,
    parse_cmd,
)
from daemon.api.models import ModelDefinition
from daemon.models.registry import definition_hash
from daemon.models.registry import normalize as registry_normalize
from daemon.validation import DefinitionRejected, check_definition

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


def test_a_typed_key_inside_extra_moves_to_its_field() -> None:
    spec = SpeculativeSettings.model_validate({"extra": {"method": "mtp", "k": 1}})
    assert (spec.method, spec.extra) == ("mtp", {"k": 1})
    kept = SpeculativeSettings.model_validate({"method": "eagle", "extra": {"method": "mtp"}})
    assert (kept.method, kept.extra) == ("eagle", {})
    graph = CompilationSettings.model_validate({"extra": {"cudagraph_mode": "none"}})
    assert (graph.cudagraph_mode, graph.extra) == ("NONE", {})


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


def test_the_budget_hashes_alike_after_its_trip_through_bytes() -> None:
    via_bytes = int(0.1 * (1 << 30)) / (1 << 30)  # what the agent reads back from the launch spec
    assert via_bytes != 0.1
    assert config_hash("img", VllmSettings(), "m", "m", [], 0.1) == config_hash("img", VllmSettings(), "m", "m", [],
                                                                                 via_bytes)
    assert config_hash("img", VllmSettings(), "m", "m", [], None) != config_hash("img", VllmSettings(), "m", "m", [],
                                                                                  0.1)


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
    assert flags.pop("runtime") is None  # the settings union's tag (agent.api.runtimes.RuntimeSettings): no flag
    assert all(flags.values()), flags
    assert json.dumps(schema)  # serializable for the app


# --- launch policy: what a vLLM launch may carry ---------------------------------------------------

@pytest.mark.parametrize(("args", "reason"), [
    (["--host", "0.0.0.0"], "opens the runtime to the network"),
    (["--port=9000"], "picks the runtime's port"),
    (["--api_key", "k"], "credentials"),
    (["--trust-remote-code"], "runs code from outside the image"),
    (["--tool-parser-plugin", "/models/p.py"], "runs code"),
    (["--model", "/models/other"], "names the model"),
    (["--served-model-name=x"], "names the model"),
    (["--download-dir", "/models/x"], "downloads weights"),
    (["--gpu-memory-utilization", "0.99"], "memory_budget_gib owns"),
    (["--config", "/models/flags.yaml"], "reads more flags from a file"),
    (["--kv-transfer-config.kv_connector=X"], "opens the runtime to the network"),
    (["--trust-remote"], "argparse reads it as --trust-remote-code"),
    (["--host 0.0.0.0"], "opens the runtime to the network"),
])
def test_hostile_vllm_flags_are_refused_with_the_reason(args: list[str], reason: str) -> None:
    with pytest.raises(PolicyViolation, match=reason):
        check_extra_args(args, "/srv/models/m", runtime="vllm")


@pytest.mark.parametrize("args", [
    ["--tokenizer", "/etc/tok"], ["--tokenizer=org/remote-repo"], ["--chat-template", "/models/../etc/t.jinja"],
    ["--generation-config", "/root/.cache/x"], ["--lora-modules", "a=/models/a", "b=/tmp/b"],
    ["--lora-modules", '{"name": "a", "path": "/data/a"}'], ["--tokenizer", "-x"],
])
def test_vllm_reads_files_from_the_models_mount_only(args: list[str]) -> None:
    with pytest.raises(PolicyViolation, match="models folder|needs a value"):
        check_extra_args(args, "/srv/models/m", runtime="vllm")


def test_ordinary_vllm_flags_pass() -> None:
    check_extra_args(["--enforce-eager", "--tokenizer", "/models/org/tok", "--chat-template", "{{ messages }}",
                      "--generation-config", "auto", "--lora-modules", "a=/models/a", "--seed", "3",
                      "--reasoning-parser", "qwen3", "--max_num_seqs=4", "-O3", "--model-impl", "vllm"],
                     "/srv/models/m", runtime="vllm")


def test_an_unreadable_owned_flag_is_a_policy_refusal() -> None:
    with pytest.raises(PolicyViolation, match="--max-num-seqs needs a positive whole number"):
        check_extra_args(["--max-num-seqs", "lots"], "/srv/models/m", runtime="vllm")


def test_the_draft_model_must_be_under_the_mount_wherever_it_is_set() -> None:
    check_vllm_settings(VllmSettings(speculative=SpeculativeSettings(method="eagle", model="/models/draft")))
    with pytest.raises(PolicyViolation, match="speculative model 'org/draft'"):
        check_vllm_settings(VllmSettings(speculative=SpeculativeSettings(method="eagle", model="org/draft")))
    with pytest.raises(PolicyViolation, match="speculative model '/etc/x'"):
        check_vllm_settings(VllmSettings(), ["--speculative-config.model=/etc/x"])


def test_vllm_environment_takes_tuning_names_but_no_paths_keys_or_plugins() -> None:
    check_env({"VLLM_ATTENTION_BACKEND": "FLASHINFER", "NCCL_P2P_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0",
               "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, runtime="vllm")
    for name in ("VLLM_API_KEY", "VLLM_PLUGINS", "VLLM_NCCL_SO_PATH", "VLLM_HOST_IP", "NCCL_NET_PLUGIN",
                 "VLLM_USE_MODELSCOPE", "HF_ENDPOINT", "LD_PRELOAD"):
        with pytest.raises(PolicyViolation, match=f"{name}.*not allowed for vLLM"):
            check_env({name: "x"}, runtime="vllm")
    with pytest.raises(PolicyViolation, match="not allowed for a runtime"):
        check_env({"VLLM_ATTENTION_BACKEND": "x"})  # llama.cpp's list has no vLLM names


def test_check_launch_runs_every_check_for_the_runtime() -> None:
    check_launch("vllm", ["--enforce-eager"], {"VLLM_LOGGING_LEVEL": "INFO"}, "/srv/models/m")
    with pytest.raises(PolicyViolation, match="speculative model"):
        check_launch("vllm", [], {}, "/srv/models/m",
                     vllm_settings=VllmSettings(speculative=SpeculativeSettings(model="/tmp/d")))
    with pytest.raises(PolicyViolation, match="not allowed for vLLM"):
        check_launch("vllm", [], {"VLLM_PORT": "1"}, "/srv/models/m")


# --- the daemon: checked on save, normalized, hashed per runtime -----------------------------------

def vllm_definition(**kw: object) -> ModelDefinition:
    fields: dict[str, object] = {"id": "ornith", "served_name": "ornith", "runtime": "vllm",
                                 "model_path": "/srv/models/ornith", "image": "vllm/vllm-openai:v0.11",
                                 "memory_budget_gib": 60.0, **kw}
    return ModelDefinition.model_validate(fields)


def test_the_daemon_refuses_a_hostile_vllm_definition_on_save() -> None:
    with pytest.raises(DefinitionRejected, match="extra_args: extra argument --host"):
        check_definition(vllm_definition(extra_args=["--host", "0.0.0.0"]))
    with pytest.raises(DefinitionRejected, match="extra_args: --max-num-seqs needs"):
        check_definition(vllm_definition(extra_args=["--max-num-seqs=x"]))
    with pytest.raises(DefinitionRejected, match="vllm: speculative model"):
        check_definition(vllm_definition(vllm={"speculative": {"model": "org/draft"}}))
    with pytest.raises(DefinitionRejected, match="env: .*not allowed for vLLM"):
        check_definition(vllm_definition(env={"VLLM_API_KEY": "k"}))
    check_definition(vllm_definition(extra_args=["--enforce-eager"], env={"VLLM_USE_V1": "1"}))


def test_the_registry_lifts_owned_flags_and_hashes_with_the_vllm_rules() -> None:
    saved = registry_normalize(vllm_definition(vllm={"max_num_seqs": 4}, extra_args=["--max_num_seqs=8", "--x"]))
    assert (saved.vllm.max_num_seqs, saved.extra_args) == (8, ["--x"])
    assert definition_hash(saved) == config_hash("vllm/vllm-openai:v0.11", VllmSettings(max_num_seqs=8),
                                                 "/srv/models/ornith", "ornith", ["--x"], 60.0)
    assert definition_hash(saved) != definition_hash(saved.model_copy(update={"image": "vllm/vllm-openai:v0.12"}))
