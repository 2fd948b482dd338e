"""The vLLM driver against a real Docker engine (``_docker_support``) and a fake vLLM image.

The pure parts (the create body, the metrics) are asserted exactly; the rest runs containers:
start -> ready -> a metrics sample -> "restart pending" once the definition's hash changes -> an
agent restart adopts the running container (the same one, found by label, with no record file)
-> stop removes it; a crash is a failure with the last log lines; a missing image is refused.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

from agent.api.models import GpuInfo, InstanceState, LaunchSpec
from agent.api.vllm import VllmSettings, config_hash
from agent.manager import InstanceManager
from agent.paths import AgentPaths
from agent.records import ProcessRecords
from agent.runtimes.docker import DockerClient, NotFound, split_image
from agent.runtimes.driver import NoRuntime, SpecRejected
from agent.runtimes.drivers import Drivers
from agent.runtimes.vllm import (
    LABEL_MODEL,
    LABEL_VERSION_PROBE,
    VERSIONS_FILE,
    VllmDriver,
    create_body,
    label_version,
    parse_metrics,
    probed_version,
)
from tests.agent._docker_support import (  # noqa: F401 - fixtures
    HOST_PYTHON,
    Engine,
    docker_engine,
    fake_vllm_image,
)

READY_TIMEOUT_S = 20.0
SETTLED = {InstanceState.READY, InstanceState.FAILED, InstanceState.STOPPED}


def test_create_body_is_the_container_contract() -> None:
    spec = LaunchSpec(instance_id="qwen", runtime="vllm", model_path="/srv/models/Qwen3-8B", served_name="qwen3",
                      env={"CUDA_VISIBLE_DEVICES": "0"}, memory_budget_bytes=24 * 2**30)
    body = create_body(spec, "vllm/vllm-openai:v0.11.0", ["--model", "/models/Qwen3-8B"], 18090, "KEY",
                       "/srv/models/Qwen3-8B", "Qwen3-8B", "abc123", nvidia=True)
    assert body == {
        "Image": "vllm/vllm-openai:v0.11.0",
        "Cmd": ["--model", "/models/Qwen3-8B"],
        "Env": ["CUDA_VISIBLE_DEVICES=0", "VLLM_API_KEY=KEY"],
        "Labels": {"mirbadllm.model": "qwen", "mirbadllm.served-name": "qwen3", "mirbadllm.port": "18090",
                   "mirbadllm.config-hash": "abc123", "mirbadllm.budget-gib": "24"},
        "ExposedPorts": {"8000/tcp": {}},
        "HostConfig": {
            "PortBindings": {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18090"}]},
            "Binds": ["/srv/models/Qwen3-8B:/models/Qwen3-8B:ro"],
            "RestartPolicy": {"Name": "no"},
            "IpcMode": "host",
            "DeviceRequests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
        },
    }
    without = create_body(spec.model_copy(update={"memory_budget_bytes": None}), "img", [], 1, "K", "/m", "m",
                          "h", nvidia=False)
    assert "DeviceRequests" not in without["HostConfig"]
    assert "mirbadllm.budget-gib" not in without["Labels"]


def test_budget_becomes_the_gpu_share(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    gpu = GpuInfo(index=0, name="NVIDIA H200", memory_total=140 * 2**30)
    driver = VllmDriver(AgentPaths(tmp_path / "agent"), gpus=lambda: [gpu])
    spec = LaunchSpec(instance_id="t", runtime="vllm", model_path=str(folder), served_name="tiny",
                      memory_budget_bytes=35 * 2**30)
    argv = driver.build_command(spec, 18000)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.2500"
    assert argv[:4] == ["--model", "/models/tiny", "--served-model-name", "tiny"]
    no_gpu = VllmDriver(AgentPaths(tmp_path / "agent"))
    assert "--gpu-memory-utilization" not in no_gpu.build_command(spec, 18000)


def test_check_refuses_what_reaches_beyond_the_model(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    driver = VllmDriver(AgentPaths(tmp_path / "agent"))
    base = {"instance_id": "t", "runtime": "vllm", "model_path": str(folder), "served_name": "tiny"}
    driver.check(LaunchSpec.model_validate(base))
    with pytest.raises(SpecRejected, match="--tokenizer"):
        driver.check(LaunchSpec.model_validate({**base, "extra_args": ["--tokenizer", "/etc"]}))
    with pytest.raises(SpecRejected, match="LD_PRELOAD"):
        driver.check(LaunchSpec.model_validate({**base, "env": {"LD_PRELOAD": "/x.so"}}))
    with pytest.raises(SpecRejected, match="model folder"):
        driver.check(LaunchSpec.model_validate({**base, "model_path": str(tmp_path / "absent")}))
    with pytest.raises(NoRuntime, match="Linux"):
        VllmDriver(AgentPaths(tmp_path / "agent"), platform="win32").check(LaunchSpec.model_validate(base))


def test_metrics_are_read_from_vllm_names() -> None:
    text = ('# TYPE vllm:num_requests_running gauge\n'
            'vllm:num_requests_running{model_name="a"} 2.0\n'
            'vllm:num_requests_waiting{model_name="a"} 1.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.25\n'
            'vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.75\n'
            'vllm:prompt_tokens_total{model_name="a"} 120.0\n'
            'vllm:generation_tokens_total{model_name="a"} 4.5e+01\n')
    assert parse_metrics(text) == {"requests_processing": 2.0, "requests_deferred": 1.0,
                                   "prompt_tokens_total": 120.0, "generation_tokens_total": 45.0,
                                   "kv_cache_usage_ratio": 0.5, "kv_source": "metrics"}
    legacy = parse_metrics('vllm:gpu_cache_usage_perc{model_name="a"} 0.1\n')
    assert legacy["kv_cache_usage_ratio"] == 0.1
    assert parse_metrics("")["requests_processing"] is None


def test_pull_reference_splits_tag_and_digest() -> None:
    assert split_image("localhost:5000/vllm/vllm-openai") == ("localhost:5000/vllm/vllm-openai", "latest")
    assert split_image("vllm/vllm-openai:v0.11.0") == ("vllm/vllm-openai", "v0.11.0")
    assert split_image("vllm/x@sha256:ab") == ("vllm/x", "sha256:ab")


# -- against the engine ------------------------------------------------------------------------


@pytest.fixture
def model_folder(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "tiny-model", **faults: object) -> Path:
        folder = tmp_path / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text('{"architectures": ["FakeForCausalLM"]}')
        if faults:
            (folder / "fake_vllm.json").write_text(json.dumps(faults))
        return folder
    return make


@pytest.fixture
async def make_agent(tmp_path: Path, port_base: int, docker_engine: Engine, fake_vllm_image: str,  # noqa: F811
                     ) -> AsyncIterator[Callable[[], InstanceManager]]:
    """``make_agent()``: an agent's manager with the vLLM driver on the test engine, one home;
    every container it made is removed at teardown."""
    made: list[InstanceManager] = []

    def make() -> InstanceManager:
        paths = AgentPaths(tmp_path / "agent").ensure()
        driver = VllmDriver(paths, image=fake_vllm_image, socket=docker_engine.socket, stop_timeout_s=5)
        manager = InstanceManager(Drivers(driver), ProcessRecords(paths.records_file), port_base)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.close()
    client = DockerClient(docker_engine.socket)
    for item in await client.containers(LABEL_MODEL):
        await client.delete(str(item["Id"]), force=True)
    await client.close()


def spec_for(folder: Path, instance_id: str = "m", **kw: object) -> LaunchSpec:
    return LaunchSpec.model_validate({"instance_id": instance_id, "runtime": "vllm", "model_path": str(folder),
                                      "served_name": f"{instance_id}-served", "startup_timeout_s": 15, **kw})


async def settled(manager: InstanceManager, instance_id: str) -> InstanceState:
    assert await manager.wait_for(lambda: manager.info(instance_id).state in SETTLED, READY_TIMEOUT_S)
    return manager.info(instance_id).state


async def test_start_ready_sample_pending_adopt_stop(make_agent: Callable[[], InstanceManager],
                                                     model_folder: Callable[..., Path],
                                                     docker_engine: Engine,  # noqa: F811
                                                     fake_vllm_image: str) -> None:  # noqa: F811
    folder = model_folder()
    spec = spec_for(folder)
    agent = make_agent()
    started = await agent.start(spec)
    assert started.state is InstanceState.STARTING
    assert await settled(agent, "m") is InstanceState.READY, agent.info("m")
    info = agent.info("m")
    client = DockerClient(docker_engine.socket)
    try:
        container = await client.inspect("ss-m")
        labels = container["Config"]["Labels"]
        assert labels["mirbadllm.model"] == "m"
        assert labels["mirbadllm.served-name"] == "m-served"
        assert labels["mirbadllm.port"] == str(info.port)
        assert labels["mirbadllm.config-hash"] == info.config_hash
        assert info.config_hash == config_hash(fake_vllm_image, VllmSettings(), str(folder), "m-served", [])
        host = container["HostConfig"]
        assert host["Binds"] == [f"{folder}:/models/tiny-model:ro"]
        assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(info.port)}]}
        assert host["RestartPolicy"]["Name"] == "no" and host["IpcMode"] == "host"
        assert not host.get("DeviceRequests")  # no NVIDIA GPU on the test node
        assert container["Config"]["Cmd"][:4] == ["--model", "/models/tiny-model", "--served-model-name",
                                                  "m-served"]

        # It serves, with its key; the driver reads its vllm:* figures.
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {info.api_key}"}
            async with session.post(f"{info.endpoint}/v1/chat/completions", headers=headers,
                                    json={"model": "m-served", "messages": [{"role": "user", "content": "hi"}],
                                          "stream": True}) as resp:
                assert resp.status == 200
                streamed = await resp.text()
            assert '"content": "Hello"' in streamed and "data: [DONE]" in streamed
            async with session.get(f"{info.endpoint}/v1/models") as resp:
                assert resp.status == 401  # the key is required
            run = agent.runs()["m"]
            figures = await agent.driver_for(run).scrape(run, session)
        assert figures["generation_tokens_total"] == 7.0
        assert figures["prompt_tokens_total"] == 5.0
        assert figures["requests_processing"] == 0.0 and figures["kv_source"] == "metrics"

        # The definition changes: its hash is no longer the running one's (restart pending).
        changed = spec.model_copy(update={"vllm": VllmSettings(max_num_seqs=8)})
        assert agent.driver.config_hash(changed) != info.config_hash  # type: ignore[attr-defined]
        assert agent.driver.config_hash(spec) == info.config_hash  # type: ignore[attr-defined]

        # The agent goes away and comes back with no record file: Docker is the truth.
        container_id = container["Id"]
        await agent.close()
        agent.records.path.unlink()
        again = make_agent()
        assert await again.adopt_recorded() == ["m"]
        assert await settled(again, "m") is InstanceState.READY
        adopted = again.info("m")
        assert adopted.adopted and adopted.api_key == info.api_key and adopted.port == info.port
        assert adopted.config_hash == info.config_hash
        assert adopted.argv == container["Config"]["Cmd"]
        assert (await client.inspect("ss-m"))["Id"] == container_id
        assert again.runs()["m"].process.container_id == container_id  # type: ignore[attr-defined]

        # And once more through the record the adopting agent wrote (the recorded path).
        await again.close()
        assert again.records.load()["m"].runtime == "vllm"
        third = make_agent()
        assert await third.adopt_recorded() == ["m"]
        assert await settled(third, "m") is InstanceState.READY
        assert third.runs()["m"].process.container_id == container_id  # type: ignore[attr-defined]
        again = third

        stopped = await again.stop("m")
        assert stopped.state is InstanceState.STOPPED
        with pytest.raises(NotFound):
            await client.inspect("ss-m")
    finally:
        await client.close()


async def test_crash_after_ready_is_a_failure_with_the_last_lines(make_agent: Callable[[], InstanceManager],
                                                                  model_folder: Callable[..., Path]) -> None:
    agent = make_agent()
    await agent.start(spec_for(model_folder(crash_after=1), "crash"))
    assert await settled(agent, "crash") is InstanceState.READY
    info = agent.info("crash")
    async with aiohttp.ClientSession() as session, session.post(
            f"{info.endpoint}/v1/completions", json={"prompt": "x", "max_tokens": 2},
            headers={"Authorization": f"Bearer {info.api_key}"}) as resp:
        assert resp.status == 200
    assert await agent.wait_for(lambda: agent.info("crash").state is InstanceState.FAILED, READY_TIMEOUT_S)
    failed = agent.info("crash")
    assert failed.exit_code == 3
    assert failed.error is not None and "EngineCore died after 1 requests" in failed.error
    assert any("EngineCore died" in line for line in failed.last_log_lines)
    assert 0 < len(failed.last_log_lines) <= 20


async def test_crash_at_start_fails_and_removes_the_container(make_agent: Callable[[], InstanceManager],
                                                              model_folder: Callable[..., Path],
                                                              docker_engine: Engine) -> None:  # noqa: F811
    agent = make_agent()
    await agent.start(spec_for(model_folder("oom", exit_code=2), "oom"))
    assert await settled(agent, "oom") is InstanceState.FAILED
    failed = agent.info("oom")
    assert failed.exit_code == 2
    assert failed.error == "vllm exited 2: ERROR: CUDA out of memory while loading the model (fake failure)"
    assert any("CUDA out of memory" in line for line in failed.last_log_lines)
    client = DockerClient(docker_engine.socket)
    try:
        with pytest.raises(NotFound):
            await client.inspect("ss-oom")
    finally:
        await client.close()


async def test_a_missing_image_is_refused_with_the_engines_word(make_agent: Callable[[], InstanceManager],
                                                                model_folder: Callable[..., Path]) -> None:
    agent = make_agent()
    spec = spec_for(model_folder(), "noimg", image="localhost:1/mirbadllm/absent:1")
    with pytest.raises(NoRuntime) as refused:
        await agent.start(spec)
    assert "image localhost:1/mirbadllm/absent:1 is not on this node and cannot be pulled" in str(refused.value)
    assert "connection refused" in str(refused.value)
    assert agent.info("noimg").state is InstanceState.STOPPED
    assert agent.get("noimg").logs.tail(5)[0] == "pulling localhost:1/mirbadllm/absent:1 (it is not on this node yet)"


async def test_offer_says_what_the_engine_is(tmp_path: Path, docker_engine: Engine,  # noqa: F811
                                             fake_vllm_image: str) -> None:  # noqa: F811
    driver = VllmDriver(AgentPaths(tmp_path / "agent"), image=fake_vllm_image, socket=docker_engine.socket)
    offer = await driver.offer()
    assert offer.available and offer.runtime == "vllm" and offer.location == fake_vllm_image
    assert offer.version is None  # no label; the image is being run once for its version
    assert offer.reason is not None and offer.reason.startswith(
        "vLLM version unknown: reading it from the image (running it once); Docker ")
    assert offer.digest is not None and offer.digest.startswith("sha256:")
    assert await driver.offer() is offer  # cached
    await driver.close()
    missing = VllmDriver(AgentPaths(tmp_path / "agent"), socket=str(tmp_path / "no.sock"))
    gone = await missing.offer()
    assert not gone.available and gone.reason == f"no Docker engine here: {tmp_path / 'no.sock'} does not exist"
    elsewhere = await VllmDriver(AgentPaths(tmp_path / "agent"), platform="darwin").offer()
    assert not elsewhere.available and elsewhere.reason == "vLLM containers run on Linux nodes only"


async def test_a_container_that_exited_while_no_agent_watched_is_a_failure(
        make_agent: Callable[[], InstanceManager], model_folder: Callable[..., Path],
        docker_engine: Engine) -> None:  # noqa: F811
    folder = model_folder("gone", crash_after=1)
    agent = make_agent()
    await agent.start(spec_for(folder, "gone"))
    assert await settled(agent, "gone") is InstanceState.READY
    info = agent.info("gone")
    await agent.close()  # the agent goes away; the container keeps serving
    client = DockerClient(docker_engine.socket)
    try:
        old_id = (await client.inspect("ss-gone"))["Id"]
        async with aiohttp.ClientSession() as session, session.post(
                f"{info.endpoint}/v1/completions", json={"prompt": "x", "max_tokens": 2},
                headers={"Authorization": f"Bearer {info.api_key}"}) as resp:
            assert resp.status == 200
        assert await client.wait(old_id) == 3  # it crashed with nobody watching

        again = make_agent()
        assert await again.adopt_recorded() == []
        failed = again.info("gone")
        assert failed.state is InstanceState.FAILED and failed.adopted
        assert failed.exit_code == 3
        assert failed.error == "vllm exited 3: ERROR: EngineCore died after 1 requests (fake crash)"
        assert failed.last_log_lines[-1] == "ERROR: EngineCore died after 1 requests (fake crash)"
        assert any("vLLM API server version" in line for line in failed.last_log_lines)
        assert 0 < len(failed.last_log_lines) <= 20
        assert failed.served_name == "gone-served" and failed.config_hash == info.config_hash
        assert (await client.inspect("ss-gone"))["State"]["Status"] == "exited"  # kept for `docker logs`

        # The next start removes the exited container and runs a new one.
        (folder / "fake_vllm.json").write_text("{}")
        await again.start(spec_for(folder, "gone"))
        assert await settled(again, "gone") is InstanceState.READY
        assert (await client.inspect("ss-gone"))["Id"] != old_id
        await again.stop("gone")

        # Acknowledging a failure found this way removes its container too.
        (folder / "fake_vllm.json").write_text('{"crash_after": 1}')
        await again.start(spec_for(folder, "gone"))
        assert await settled(again, "gone") is InstanceState.READY
        info = again.info("gone")
        await again.close()
        async with aiohttp.ClientSession() as session, session.post(
                f"{info.endpoint}/v1/completions", json={"prompt": "x", "max_tokens": 2},
                headers={"Authorization": f"Bearer {info.api_key}"}) as resp:
            assert resp.status == 200
        assert await client.wait("ss-gone") == 3
        third = make_agent()
        await third.adopt_recorded()
        assert third.info("gone").state is InstanceState.FAILED
        assert (await third.stop("gone")).state is InstanceState.STOPPED
        with pytest.raises(NotFound):
            await client.inspect("ss-gone")
    finally:
        await client.close()


def test_the_vllm_version_from_labels_is_vllms_own() -> None:
    ubuntu = {"org.opencontainers.image.ref.name": "ubuntu", "org.opencontainers.image.version": "22.04",
              "maintainer": "NVIDIA CORPORATION <cudatools@nvidia.com>"}
    assert label_version(ubuntu) is None  # what vllm/vllm-openai inherits from its CUDA base
    assert label_version(None) is None
    assert label_version({**ubuntu, "org.opencontainers.image.title": "vllm-openai",
                          "org.opencontainers.image.version": "v0.11.2"}) == "0.11.2"
    assert label_version({"org.opencontainers.image.source": "https://github.com/vllm-project/vllm",
                          "org.opencontainers.image.version": "0.10.1.1"}) == "0.10.1.1"
    assert label_version({**ubuntu, "ai.vllm.version": "0.9.2"}) == "0.9.2"
    assert label_version({"ai.vllm.version": "not a version; rm -rf"}) is None
    assert probed_version("WARNING: no GPU\n0.11.0\n") == "0.11.0"
    assert probed_version("0.6.3.post1") == "0.6.3.post1"
    assert probed_version("Traceback (most recent call last):\nModuleNotFoundError: No module named 'vllm'") is None


def image_stdlib() -> Path:
    """The stdlib folder of the interpreter the fake image is made of (the host's /usr/bin/python3)."""
    done = subprocess.run([HOST_PYTHON, "-S", "-c", "import os; print(os.path.dirname(os.__file__))"],
                          capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def derived_image(engine: Engine, base: str, tag: str, tmp_path: Path, *, label: dict[str, str] | None = None,
                  vllm_version: str | None = None) -> str:
    """``base`` with labels and/or a fake ``vllm`` module (and the ``site`` module a Python run
    without ``-S`` needs), committed as ``tag``."""
    made = engine.cli("create", base)
    assert made.returncode == 0, made.stderr.decode()
    container = made.stdout.decode().strip()
    stdlib = image_stdlib()
    try:
        if vllm_version is not None:
            package = tmp_path / "pkg" / "vllm"
            package.mkdir(parents=True)
            (package / "__init__.py").write_text(f"__version__ = {vllm_version!r}\n")
            for name in ("site.py", "_sitebuiltins.py"):
                done = engine.cli("cp", str(stdlib / name), f"{container}:{stdlib / name}")
                assert done.returncode == 0, done.stderr.decode()
            done = engine.cli("cp", str(package), f"{container}:{stdlib}/vllm")
            assert done.returncode == 0, done.stderr.decode()
        changes = [arg for key, value in (label or {}).items() for arg in ("-c", f"LABEL {key}={value}")]
        done = engine.cli("commit", *changes, container, tag)
        assert done.returncode == 0, done.stderr.decode()
    finally:
        engine.cli("rm", "-f", container)
    return tag


async def test_the_offer_reads_the_vllm_version_of_the_image(tmp_path: Path, docker_engine: Engine,  # noqa: F811
                                                             fake_vllm_image: str) -> None:  # noqa: F811
    home = AgentPaths(tmp_path / "agent").ensure()
    client = DockerClient(docker_engine.socket)
    try:
        # The fake as it is: no label, no vllm module -> run once, and it says why there is no version.
        plain = VllmDriver(home, image=fake_vllm_image, socket=docker_engine.socket)
        assert (await plain.offer()).version is None
        await plain.version_probes()
        offer = await plain.offer()
        assert offer.available and offer.version is None and offer.reason is not None
        assert offer.reason.startswith("vLLM version unknown: the image printed no vLLM version (exited 1: ")
        assert await client.containers(LABEL_VERSION_PROBE) == []  # the probe's container is gone
        await plain.close()

        # With a vllm module: what running it printed, cached on disk by image id.
        module = derived_image(docker_engine, fake_vllm_image, "mirbadllm-fake-vllm:with-module", tmp_path,
                               vllm_version="0.11.0")
        driver = VllmDriver(home, image=module, socket=docker_engine.socket)
        assert (await driver.offer()).reason == (
            "vLLM version unknown: reading it from the image (running it once); "
            f"Docker {(await client.version())['Version']}")
        await driver.version_probes()
        offer = await driver.offer()
        assert offer.version is not None and offer.version.startswith("0.11.0 (Docker ") and offer.reason is None
        image_id = (await client.image(module))["Id"]
        assert json.loads((home.home / VERSIONS_FILE).read_text())[image_id] == {"version": "0.11.0"}
        await driver.close()
        again = VllmDriver(home, image=module, socket=docker_engine.socket)  # a restarted agent
        assert (await again.offer()).version == offer.version
        assert again._probes == {}  # read from the cache, not run again
        await again.close()

        # With vLLM's version in its labels: read at once, nothing is run.
        labelled = derived_image(docker_engine, fake_vllm_image, "mirbadllm-fake-vllm:labelled", tmp_path,
                                 label={"org.opencontainers.image.title": "vllm-openai",
                                        "org.opencontainers.image.version": "0.10.2"})
        driver = VllmDriver(home, image=labelled, socket=docker_engine.socket)
        offer = await driver.offer()
        assert offer.version is not None and offer.version.startswith("0.10.2 (Docker ") and driver._probes == {}
        await driver.close()

        # A probe that says nothing in time is given up, its container removed.
        slow = VllmDriver(AgentPaths(tmp_path / "slow").ensure(), image=fake_vllm_image,
                          socket=docker_engine.socket, version_timeout_s=1,
                          version_probe=["/usr/bin/python3", "-S", "-c", "import time; time.sleep(60)"])
        await slow.offer()
        await slow.version_probes()
        offer = await slow.offer()
        assert offer.reason is not None and "did not say its vLLM version within 1 s" in offer.reason
        assert await client.containers(LABEL_VERSION_PROBE) == []
        await slow.close()
    finally:
        await client.close()
