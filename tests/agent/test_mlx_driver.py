"""The MLX driver: ``mlx_lm.server``'s argv, its launch policy, its offer, and a whole run.

The argv builder and parser are pure and golden-tested. The driver runs on this Linux machine
with its platform seam set to darwin/arm64 and the fake server (``tests/fakes/fake_mlx_server.py``)
as ``mlx_lm.server``: start -> ready -> a request through the agent's proxy -> an agent restart
adopts it -> stop; a crash fails the instance with its last log lines.
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.api.client import AgentClient, iter_sse_data
from agent.api.launch_policy import (
    PolicyViolation,
    check_extra_args,
    check_mlx_settings,
)
from agent.api.mlx import (
    MlxSettings,
    build_args,
    config_hash,
    lift_extra_args,
    parse_args,
)
from agent.api.models import GpuInfo, InstanceInfo, InstanceState, LaunchSpec
from agent.deps import AgentDeps, build_deps
from agent.identity import server_ssl_context
from agent.paths import AgentPaths
from agent.runtimes.driver import NoRuntime, SpecRejected
from agent.runtimes.mlx import (
    NOT_APPLE_SILICON,
    MlxDriver,
    MlxPlatform,
    build_command,
    check_spec,
    link_model,
    mlx_lm_version,
)
from agent.server import create_app, start_server
from daemon.api.models import ModelDefinition
from daemon.models.registry import definition_hash, normalize
from daemon.validation import DefinitionRejected, check_definition
from tests.agent._support import eventually, issue_tls
from tests.fakes import FakeGpuProbe, fake_runtime_script

FAKE_MLX_SERVER = Path(__file__).parents[1] / "fakes" / "fake_mlx_server.py"
MAC = MlxPlatform("darwin", "arm64")
GPU = GpuInfo(index=0, name="Apple M3 (fake)", uuid="GPU-0", memory_total=16 << 30, memory_used=1 << 30)
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the fake's wrapper is a /bin/sh script")


def write_fake_mlx(directory: Path, **switches: object) -> Path:
    """An executable ``mlx_lm.server`` that runs the fake with ``switches`` (FAKE_*) baked in."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mlx_lm.server"
    path.write_text(fake_runtime_script(switches, fake=FAKE_MLX_SERVER))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def mlx_model(root: Path, name: str = "Qwen3-0.6B-4bit") -> Path:
    folder = root / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def mlx_spec(model: Path, instance_id: str = "q", served_name: str = "qwen-mini", **kw: Any) -> LaunchSpec:
    return LaunchSpec(instance_id=instance_id, runtime="mlx", model_path=str(model), served_name=served_name,
                      memory_budget_bytes=kw.pop("memory_budget_bytes", 1 << 20), **kw)


# --- argv: golden, parsed back, hashed ------------------------------------------------------------

def test_build_args_golden() -> None:
    settings = MlxSettings(max_tokens=2048, temp=0.7, top_p=0.9, top_k=40, min_p=0.05, decode_concurrency=4,
                           prompt_concurrency=2, prefill_step_size=512, prompt_cache_size=4,
                           prompt_cache_bytes=8 << 30, max_kv_size=8192, draft_model="/m/Qwen3-draft",
                           num_draft_tokens=2, adapter_path="/m/lora", use_default_chat_template=True,
                           chat_template_args='{"enable_thinking": false}', log_level="WARNING")
    assert build_args(settings, "/m/Qwen3", "qwen", 18100, ["--chat-template", "{{ x }}", "--future-flag"]) == [
        "--model", "qwen", "--host", "127.0.0.1", "--port", "18100",
        "--max-tokens", "2048", "--temp", "0.7", "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05",
        "--decode-concurrency", "4", "--prompt-concurrency", "2", "--prefill-step-size", "512",
        "--prompt-cache-size", "4", "--prompt-cache-bytes", str(8 << 30), "--max-kv-size", "8192",
        "--draft-model", "/m/Qwen3-draft", "--num-draft-tokens", "2", "--adapter-path", "/m/lora",
        "--chat-template", "{{ x }}", "--use-default-chat-template",
        "--chat-template-args", '{"enable_thinking":false}', "--log-level", "WARNING",
        "--future-flag"]
    # Nothing set: only what the agent owns.
    spec = LaunchSpec(instance_id="q", runtime="mlx", model_path="/m/Qwen3", served_name="org/qwen")
    assert build_command(spec, 9) == ["--model", "org/qwen", "--host", "127.0.0.1", "--port", "9"]


def test_extra_args_are_lifted_into_the_settings_last_wins() -> None:
    settings, rest = lift_extra_args(MlxSettings(temp=0.1), ["--temp", "0.5", "--temp=0.6", "--max-tokens", "9",
                                                             "--use-default-chat-template", "--other", "x"])
    assert settings == MlxSettings(temp=0.6, max_tokens=9, use_default_chat_template=True)
    assert rest == ["--other", "x"]
    with pytest.raises(ValueError, match="--top-k needs a value"):
        lift_extra_args(MlxSettings(), ["--top-k"])


def test_parse_args_reads_the_argv_back() -> None:
    settings = MlxSettings(max_tokens=64, temp=0.25, top_k=5, adapter_path="/m/a", chat_template_args='{"a":1}',
                           use_default_chat_template=True, log_level="DEBUG")
    argv = ["/opt/mlx/bin/mlx_lm.server", *build_args(settings, "/m/x", "served", 18123, ["--extra"])]
    parsed = parse_args(argv)
    assert (parsed.served_name, parsed.host, parsed.port) == ("served", "127.0.0.1", 18123)
    assert parsed.settings == settings and parsed.extra_args == ["--extra"]
    assert parse_args(argv[1:]) == parsed


def test_config_hash_follows_what_runs() -> None:
    base = config_hash(MlxSettings(temp=0.5), "/m/x", "served")
    assert base == config_hash(MlxSettings(), "/m/x", "served", ["--temp", "0.5"])  # lifted: the same run
    assert len(base) == 16
    assert base != config_hash(MlxSettings(temp=0.5), "/m/y", "served")  # another folder behind the link
    assert base != config_hash(MlxSettings(temp=0.5), "/m/x", "other")
    assert base != config_hash(MlxSettings(temp=0.6), "/m/x", "served")
    # Two spellings of one JSON object are one setting.
    assert MlxSettings(chat_template_args='{ "b": 1, "a": 2 }') == MlxSettings(chat_template_args='{"a":2,"b":1}')


def test_settings_schema_names_flag_default_and_unit() -> None:
    props = MlxSettings.model_json_schema()["properties"]
    assert props.pop("runtime")["const"] == "mlx"  # the settings union's tag (agent.api.runtimes): no flag
    assert props["max_tokens"]["flag"] == "--max-tokens" and props["max_tokens"]["runtime_default"] == 512
    assert props["decode_concurrency"]["unit"] == "requests"
    assert all({"flag", "runtime_default", "unit"} <= set(p) for p in props.values())
    with pytest.raises(ValueError, match="extra"):
        MlxSettings.model_validate({"trust_remote_code": True})
    with pytest.raises(ValueError, match="JSON object"):
        MlxSettings(chat_template_args="[1]")


# --- launch policy, on the agent and on the daemon --------------------------------------------------

@pytest.mark.parametrize(("args", "why"), [
    (["--trust-remote-code"], "runs Python code"),
    (["--host", "0.0.0.0"], "opens the runtime to the network"),
    (["--port=1"], "the agent owns"),
    (["--model", "/etc"], "model_path owns"),
    (["--adapter-path", "/etc/lora"], "may only read files"),
    (["--draft-model=/home/x/other"], "may only read files"),
    (["--temp", "-oops"], "may not start with '-'"),
])
def test_mlx_policy_refuses(args: list[str], why: str) -> None:
    with pytest.raises(PolicyViolation, match=why):
        check_extra_args(args, "/m/Qwen3", runtime="mlx")


def test_mlx_policy_allows_files_next_to_the_model() -> None:
    check_extra_args(["--adapter-path", "/m/lora", "--temp", "-0.0", "--decode-concurrency", "2"], "/m/Qwen3",
                     runtime="mlx")
    check_mlx_settings(MlxSettings(draft_model="/m/draft", adapter_path="/m/Qwen3/lora"), "/m/Qwen3")
    with pytest.raises(PolicyViolation, match="--draft-model may only read"):
        check_mlx_settings(MlxSettings(draft_model="/srv/draft"), "/m/Qwen3")


def test_daemon_refuses_a_hostile_mlx_definition_and_hashes_it_as_mlx() -> None:
    good = ModelDefinition(id="q", served_name="qwen", model_path="/m/Qwen3", runtime="mlx",
                           extra_args=["--temp", "0.5"])
    check_definition(good)
    normal = normalize(good)
    assert normal.mlx.temp == 0.5 and normal.extra_args == []  # the MLX settings own it, not llama.cpp's
    assert definition_hash(normal) == config_hash(MlxSettings(temp=0.5), "/m/Qwen3", "qwen")
    with pytest.raises(DefinitionRejected, match="--trust-remote-code"):
        check_definition(good.model_copy(update={"extra_args": ["--trust-remote-code"]}))
    with pytest.raises(DefinitionRejected, match="cannot be served by MLX"):
        check_definition(good.model_copy(update={"served_name": "../up"}))
    with pytest.raises(DefinitionRejected, match="mlx: --adapter-path"):
        check_definition(good.model_copy(update={"mlx": MlxSettings(adapter_path="/etc/ssh")}))


# --- offer and checks -------------------------------------------------------------------------------

async def test_offer_off_apple_silicon_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    exe = write_fake_mlx(tmp_path / "bin")
    paths = AgentPaths(tmp_path / "agent").ensure()
    for where in (MlxPlatform("linux", "x86_64"), MlxPlatform("darwin", "x86_64"), MlxPlatform("linux", "aarch64")):
        driver = MlxDriver(paths, exe, platform=where)
        offer = await driver.offer()
        assert (offer.runtime, offer.available, offer.reason) == ("mlx", False, NOT_APPLE_SILICON)
        with pytest.raises(NoRuntime, match=NOT_APPLE_SILICON):
            driver.check(mlx_spec(mlx_model(tmp_path)))
    if not MlxPlatform.here().apple_silicon:  # this machine, through the default seam
        assert (await MlxDriver(paths, exe).offer()).reason == NOT_APPLE_SILICON


async def test_offer_on_a_mac_finds_the_server_and_its_version(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "agent").ensure()
    missing = await MlxDriver(paths, platform=MAC, environ={"PATH": str(tmp_path / "empty")}).offer()
    assert not missing.available and "no mlx_lm.server found" in (missing.reason or "")
    assert str(paths.home / "runtimes" / "mlx") in (missing.reason or "")

    # The agent's own runtime environment: a venv whose console script names its interpreter.
    env_bin = paths.home / "runtimes" / "mlx" / "bin"
    env_bin.mkdir(parents=True)
    python = env_bin / "python3"
    python.write_text('#!/bin/sh\n[ "$1" = "-c" ] && echo 0.28.4\n')
    script = env_bin / "mlx_lm.server"
    script.write_text(f"#!{python}\nimport sys\n")
    for made in (python, script):
        made.chmod(0o755)
    asked: list[Path] = []

    def counting(path: Path) -> str | None:
        asked.append(path)
        return mlx_lm_version(path)

    driver = MlxDriver(paths, platform=MAC, environ={"PATH": ""}, version_of=counting)
    offer = await driver.offer()
    assert (offer.available, offer.version, offer.location) == (True, "0.28.4", str(script))
    assert (await driver.offer()).version == "0.28.4" and asked == [script]  # asked once, not per probe

    # A configured path wins; a script whose interpreter cannot say has no version (not a made-up one).
    fake = write_fake_mlx(tmp_path / "bin")
    offer = await MlxDriver(paths, fake, platform=MAC).offer()
    assert (offer.available, offer.location, offer.version) == (True, str(fake), None)


def test_check_spec_refuses_what_cannot_run(tmp_path: Path) -> None:
    model = mlx_model(tmp_path)
    check_spec(mlx_spec(model))
    gguf = tmp_path / "models" / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    cases = [
        (mlx_spec(gguf), "MLX model folder not found"),
        (mlx_spec(tmp_path / "models"), "no config.json"),
        (mlx_spec(model, served_name="../escape"), "cannot be served by MLX"),
        (mlx_spec(model, served_name="-x"), "cannot be served by MLX"),
        (mlx_spec(model, extra_args=["--trust-remote-code"]), "runs Python code"),
        (mlx_spec(model, env={"PYTHONPATH": "/tmp"}), "PYTHONPATH"),
        (mlx_spec(model, mlx=MlxSettings(adapter_path="/etc")), "--adapter-path may only read"),
    ]
    for spec, why in cases:
        with pytest.raises(SpecRejected, match=why):
            check_spec(spec)


# --- a whole run through the agent ------------------------------------------------------------------

@dataclass
class Agent:
    deps: AgentDeps
    client: AgentClient
    runner: Any


@pytest.fixture
async def start_agent(tmp_path: Path, port_base: int) -> AsyncIterator[Callable[..., Any]]:
    """``await start_agent(exe)``: an agent (mTLS on loopback) whose MLX driver believes it is on a Mac."""
    agents: list[Agent] = []
    tls = issue_tls(tmp_path, tmp_path / "agent" / "identity")

    async def start(exe: Path) -> Agent:
        deps = build_deps(tmp_path / "agent", mlx_server=exe, mlx_platform=MAC, telemetry_interval_s=0.05,
                          gpu_probe=FakeGpuProbe([GPU]), first_port=port_base)
        runner, port = await start_server(create_app(deps), "127.0.0.1", 0, server_ssl_context(deps.identity))
        agent = Agent(deps, AgentClient(f"https://127.0.0.1:{port}", tls.client_context()), runner)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        await agent.client.close()
        for instance_id in list(agent.deps.manager.runs()):
            await agent.deps.manager.stop(instance_id, timeout=2)
        await agent.runner.cleanup()


async def leave(agent: Agent) -> None:
    """The agent goes away (as on an upgrade): its runtimes keep serving."""
    await agent.client.close()
    await agent.runner.cleanup()
    await agent.deps.manager.close()


async def until_state(client: AgentClient, instance_id: str, *states: InstanceState) -> InstanceInfo:
    async def probe() -> InstanceInfo | None:
        info = await client.instance(instance_id)
        return info if info.state in states else None
    found: InstanceInfo = await eventually(probe, timeout=20, what=f"{instance_id} in {states}")
    return found


async def test_start_ready_proxy_adopt_stop(start_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = mlx_model(tmp_path)
    exe = write_fake_mlx(tmp_path / "bin", load_seconds=0.5, tokens=6, token_delay_s=0.01)
    agent = await start_agent(exe)
    status = await agent.client.status()
    offer = next(o for o in status.runtime_offers if o.runtime == "mlx")
    assert offer.available and offer.location == str(exe)

    await agent.client.start(mlx_spec(model, mlx=MlxSettings(max_tokens=100, temp=0.2)))
    ready = await until_state(agent.client, "q", InstanceState.READY)
    assert ready.argv[0] == str(exe) and ready.argv[1:3] == ["--model", "qwen-mini"]
    assert ready.config_hash == config_hash(MlxSettings(max_tokens=100, temp=0.2), str(model), "qwen-mini")
    lines = [line async for line in agent.client.logs("q", tail=50)]
    assert any("HF_HUB_OFFLINE=1" in line for line in lines)  # a request cannot make it download
    assert any("Starting httpd" in line for line in lines)

    client = agent.client
    url = client.proxy_url("q", "/v1/chat/completions")
    body = {"model": "qwen-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with client.session.post(url, json=body) as resp:
        assert resp.status == 200
        whole = await resp.json()
    assert whole["model"] == "qwen-mini"  # the served name found the loaded model (the link)
    assert whole["choices"][0]["message"]["content"] == "Hello from the fake mlx server"
    async with client.session.post(url, json={**body, "stream": True}) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = [event async for event in iter_sse_data(resp.content)]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1])
    assert text == "Hello from the fake mlx server"
    async with client.session.post(client.proxy_url("q", "/v1/completions"),
                                   json={"model": "qwen-mini", "prompt": "Hi", "max_tokens": 2}) as resp:
        assert (await resp.json())["choices"][0]["text"] == "Hello from"
    async with client.session.post(url, json={**body, "model": "mlx-community/other"}) as resp:
        assert resp.status == 404  # another model is not fetched (offline)

    # Telemetry: the process's figures; mlx_lm.server publishes no request or KV figures.
    async def sampled() -> Any:
        page = await client.telemetry()
        return next((s.instances["q"] for s in reversed(page.samples) if "q" in s.instances), None)
    sample = await eventually(sampled, what="a telemetry sample of q")
    assert sample.rss_bytes > 0 and sample.kv_cache_usage_ratio is None

    await leave(agent)
    again = await start_agent(exe)
    adopted = await until_state(again.client, "q", InstanceState.READY)
    assert adopted.adopted and adopted.pid == ready.pid
    async with again.client.session.post(again.client.proxy_url("q", "/v1/chat/completions"), json=body) as resp:
        assert resp.status == 200 and (await resp.json())["model"] == "qwen-mini"

    stopped = await again.client.stop("q", timeout=5)
    assert stopped.state is InstanceState.STOPPED
    assert not again.deps.manager.runs()


async def test_an_older_release_that_lists_only_its_cache_is_ready_after_one_token(  # type: ignore[no-untyped-def]
        start_agent, tmp_path: Path) -> None:
    agent = await start_agent(write_fake_mlx(tmp_path / "bin", unlisted=True))
    await agent.client.start(mlx_spec(mlx_model(tmp_path)))
    await until_state(agent.client, "q", InstanceState.READY)
    lines = [line async for line in agent.client.logs("q", tail=50)]
    assert any("Prompt processing progress: 1/1 for qwen-mini" in line for line in lines)


async def test_a_crash_fails_the_instance_with_its_last_lines(start_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = mlx_model(tmp_path)
    agent = await start_agent(write_fake_mlx(tmp_path / "bin", crash_after_s=0.5))
    await agent.client.start(mlx_spec(model))
    failed = await until_state(agent.client, "q", InstanceState.FAILED)
    assert failed.error is not None and failed.error.startswith("mlx_lm.server exited 1")
    assert "Insufficient Memory" in failed.error
    assert any(line.startswith("Traceback") for line in failed.last_log_lines)


async def test_a_model_that_does_not_load_fails_the_start(start_agent, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    agent = await start_agent(write_fake_mlx(tmp_path / "bin", exit_code=1))
    await agent.client.start(mlx_spec(mlx_model(tmp_path)))
    failed = await until_state(agent.client, "q", InstanceState.FAILED)
    assert failed.error == "mlx_lm.server exited 1: ValueError: Model type qwen9 not supported."
    assert failed.exit_code == 1


def test_the_working_folder_links_the_served_name_to_the_model(tmp_path: Path) -> None:
    model = mlx_model(tmp_path)
    workdir = tmp_path / "work"
    (workdir / "stale").mkdir(parents=True)
    link_model(workdir, "org/qwen3:0.6b", str(model))
    assert (workdir / "org" / "qwen3:0.6b").resolve() == model.resolve()
    assert sorted(p.name for p in workdir.iterdir()) == ["org"]  # afresh: nothing else is left in it
    assert (model / "config.json").is_file()  # the model's folder is untouched by the cleanup
    link_model(workdir, "qwen", str(model))
    assert [p.name for p in workdir.iterdir()] == ["qwen"] and (model / "config.json").is_file()
