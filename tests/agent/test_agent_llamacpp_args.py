"""The llama-server command line is a pure function of the settings: asserted exactly."""

from __future__ import annotations

from agent.api.llamacpp import (
    LlamaCppSettings,
    build_args,
    config_hash,
    lift_extra_args,
    parse_args,
)

FULL = LlamaCppSettings(ctx_size=8192, parallel=2, n_gpu_layers=-1, threads=4, threads_batch=8,
                        batch_size=1024, ubatch_size=256, flash_attn="on", cache_type_k="q8_0",
                        cache_type_v="q8_0", mlock=True, no_mmap=True, embeddings=True, pooling="mean",
                        seed=42, jinja=False)


def test_defaults_pass_only_what_the_agent_owns() -> None:
    assert build_args(LlamaCppSettings(), "/m/g.gguf", "gemma", 18080) == [
        "--model", "/m/g.gguf", "--alias", "gemma", "--host", "127.0.0.1", "--port", "18080",
        "--jinja", "--metrics", "--slots", "--no-webui"]


def test_every_setting_in_canonical_order() -> None:
    assert build_args(FULL, "/m/g.gguf", "gemma", 18081) == [
        "--model", "/m/g.gguf", "--alias", "gemma", "--host", "127.0.0.1", "--port", "18081",
        "--ctx-size", "8192", "--parallel", "2", "--n-gpu-layers", "-1", "--threads", "4",
        "--threads-batch", "8", "--batch-size", "1024", "--ubatch-size", "256", "--flash-attn", "on",
        "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--mlock", "--no-mmap", "--embeddings",
        "--pooling", "mean", "--seed", "42", "--no-jinja", "--metrics", "--slots", "--no-webui"]


def test_extra_args_are_lifted_last_one_wins_and_owned_flags_dropped() -> None:
    settings = LlamaCppSettings(ctx_size=512)
    extra = ["-c", "1024", "--ctx-size=2048", "--port", "9999", "--temp", "0.7", "-ngl", "5",
             "--no-mmap", "--alias", "other", "--metrics"]
    lifted, rest = lift_extra_args(settings, extra)
    assert (lifted.ctx_size, lifted.n_gpu_layers, lifted.no_mmap) == (2048, 5, True)
    assert rest == ["--temp", "0.7"]
    assert build_args(settings, "/m.gguf", "m", 18080, extra) == [
        "--model", "/m.gguf", "--alias", "m", "--host", "127.0.0.1", "--port", "18080",
        "--ctx-size", "2048", "--n-gpu-layers", "5", "--no-mmap", "--jinja",
        "--metrics", "--slots", "--no-webui", "--temp", "0.7"]


def test_parse_args_reads_a_running_argv_back() -> None:
    argv = ["/opt/llama-server"] + build_args(FULL, "/m/g.gguf", "gemma", 18090, ["--temp", "0.2"])
    parsed = parse_args(argv)
    assert parsed.settings == FULL
    assert (parsed.model_path, parsed.served_name, parsed.host, parsed.port) == (
        "/m/g.gguf", "gemma", "127.0.0.1", 18090)
    assert parsed.extra_args == ["--temp", "0.2"]


def test_parse_args_accepts_short_spellings() -> None:
    parsed = parse_args(["-m", "/x.gguf", "-a", "x", "-c", "4096", "-np", "3", "-fa", "off", "--embedding"])
    assert (parsed.settings.ctx_size, parsed.settings.parallel, parsed.settings.flash_attn) == (4096, 3, "off")
    assert parsed.settings.embeddings is True


def test_config_hash_ignores_the_port_and_tells_changes() -> None:
    base = config_hash(LlamaCppSettings(ctx_size=2048), "/m.gguf", "m")
    assert base == config_hash(LlamaCppSettings(ctx_size=2048), "/m.gguf", "m")
    # The same setting spelled as an extra argument runs the same way.
    assert base == config_hash(LlamaCppSettings(), "/m.gguf", "m", ["-c", "2048"])
    assert base != config_hash(LlamaCppSettings(ctx_size=4096), "/m.gguf", "m")
    assert base != config_hash(LlamaCppSettings(ctx_size=2048), "/m.gguf", "other")
    assert base != config_hash(LlamaCppSettings(ctx_size=2048), "/m.gguf", "m", ["--temp", "0.1"])


def test_a_built_in_chat_template_turns_jinja_off() -> None:
    # With --jinja, llama-server takes the template's name itself as a Jinja template and drops
    # every message; built-in templates need --no-jinja.
    from agent.api.llamacpp import LlamaCppSettings, build_args, parse_args

    argv = build_args(LlamaCppSettings(chat_template="gemma"), "/m.gguf", "m", 18080)
    assert argv[argv.index("--chat-template"):argv.index("--chat-template") + 3] == [
        "--chat-template", "gemma", "--no-jinja"]
    assert "--jinja" not in argv
    assert parse_args(argv).settings.chat_template == "gemma"


def test_the_driver_command_is_the_spec_through_build_args() -> None:
    # The llama.cpp driver's ``build_command(spec, port)`` (the argv after the executable) is the
    # same golden list: spec fields in, no I/O.
    from agent.api.models import LaunchSpec
    from agent.runtimes.llamacpp import build_command

    spec = LaunchSpec(instance_id="m", model_path="/m.gguf", served_name="m", settings=LlamaCppSettings(ctx_size=512),
                      extra_args=["--ctx-size=2048", "--port", "9999", "--temp", "0.7"])
    assert build_command(spec, 18080) == [
        "--model", "/m.gguf", "--alias", "m", "--host", "127.0.0.1", "--port", "18080",
        "--ctx-size", "2048", "--jinja", "--metrics", "--slots", "--no-webui", "--temp", "0.7"]
    plain = LaunchSpec(instance_id="g", model_path="/m/g.gguf", served_name="gemma")
    assert build_command(plain, 18080) == build_args(LlamaCppSettings(), "/m/g.gguf", "gemma", 18080)


# One model across nodes (agent.api.rpc): the loopback forwards to the helpers' rpc-servers.
RPC = ["127.0.0.1:41001", "127.0.0.1:41002"]


def test_rpc_servers_come_right_after_the_port() -> None:
    assert build_args(LlamaCppSettings(n_gpu_layers=99), "/m/g.gguf", "gemma", 18080, rpc=RPC) == [
        "--model", "/m/g.gguf", "--alias", "gemma", "--host", "127.0.0.1", "--port", "18080",
        "--rpc", "127.0.0.1:41001,127.0.0.1:41002", "--n-gpu-layers", "99",
        "--jinja", "--metrics", "--slots", "--no-webui"]


def test_named_gpus_with_rpc_name_the_rpc_devices_too_after_rpc() -> None:
    # llama.cpp registers the RPC devices while it reads --rpc, so --device comes after it and
    # names them (RPC0.. in peer order, as many as each helper offers); "none" leaves the local GPUs out.
    settings = LlamaCppSettings(gpus=[1], tensor_split="3,1,1", n_gpu_layers=-1)
    assert build_args(settings, "/m/g.gguf", "gemma", 18080, rpc=RPC, rpc_devices=[1, 1]) == [
        "--model", "/m/g.gguf", "--alias", "gemma", "--host", "127.0.0.1", "--port", "18080",
        "--rpc", "127.0.0.1:41001,127.0.0.1:41002", "--device", "CUDA1,RPC0,RPC1", "--n-gpu-layers", "-1",
        "--jinja", "--tensor-split", "3,1,1", "--metrics", "--slots", "--no-webui"]
    cpu_only = build_args(LlamaCppSettings(gpus=[]), "/m/g.gguf", "g", 1, rpc=RPC[:1], rpc_devices=[2])
    assert cpu_only[8:12] == ["--rpc", "127.0.0.1:41001", "--device", "RPC0,RPC1"]


def test_without_rpc_the_command_is_what_it_was() -> None:
    assert build_args(FULL, "/m/g.gguf", "gemma", 18081, rpc=[]) == build_args(FULL, "/m/g.gguf", "gemma", 18081)


def test_the_config_hash_names_the_helpers_not_the_forward_ports() -> None:
    alone = config_hash(LlamaCppSettings(), "/m/g.gguf", "g")
    split = config_hash(LlamaCppSettings(), "/m/g.gguf", "g", rpc_nodes=["a" * 64])
    assert split != alone
    assert split == config_hash(LlamaCppSettings(), "/m/g.gguf", "g", rpc_nodes=["a" * 64])
    assert split != config_hash(LlamaCppSettings(), "/m/g.gguf", "g", rpc_nodes=["b" * 64])
    assert config_hash(LlamaCppSettings(), "/m/g.gguf", "g", rpc_nodes=[]) == alone


def test_a_rpc_flag_read_back_stays_with_the_extra_args() -> None:
    argv = ["/bin/llama-server", *build_args(LlamaCppSettings(gpus=[0]), "/m/g.gguf", "g", 5, rpc=RPC[:1])]
    parsed = parse_args(argv)
    assert parsed.extra_args == ["--rpc", "127.0.0.1:41001", "--device", "CUDA0,RPC0"]
