"""The real Vulkan build on a real Vulkan device: Mesa's lavapipe (no GPU here, but a conformant
Vulkan driver). The daemon's agent finds the build's Vulkan module, lists ``Vulkan0 (llvmpipe)``,
picks Vulkan by itself, proves it on the first start (layers offloaded, a token back), serves the
real Gemma on it through ``/v1``, and obeys the node's choice of ``cpu`` and back. A Vulkan module
that crashes or does not load leaves the node on the CPU with the reason.

lavapipe is a CPU-type device, which ggml-vulkan uses only when ``GGML_VK_VISIBLE_DEVICES`` names it:
the tests set it for the agent, as an operator would. The first load on a machine compiles the
shader pipelines the model needs (minutes on 2 cores; Mesa caches them under ``~/.cache``), so one
daemon and one model serve the whole module.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import openai
import pytest
import pytest_asyncio

from agent.api.backends import Backend
from agent.api.models import InstanceState
from agent.manager import InstanceManager
from agent.paths import AgentPaths
from agent.records import ProcessRecords
from agent.runtimes.catalog import RuntimeCatalog
from agent.runtimes.llamacpp import LlamaCppDriver
from daemon.api.models import ModelState
from tests.agent._support import eventually, make_spec
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes.ports import free_port_block
from tests.runtime_parts import no_runtime

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

FIRST_LOAD_S = 2400  # the first Vulkan load compiles its shader pipelines (cached afterwards)


@pytest.fixture(scope="module")
def vulkan_build(real_llama_server: Path) -> Path:
    """The `make runtime` build folder, which must carry the Vulkan module on Linux x86-64."""
    folder = real_llama_server.parent.parent
    manifest = json.loads((folder / "runtime.json").read_text()) if (folder / "runtime.json").is_file() else {}
    module = manifest.get("backends", {}).get("vulkan", {}).get("module")
    if not module:
        no_runtime(f"{folder} has no Vulkan backend: `make system-deps` then `make runtime` (BACKENDS=auto or "
                   "cpu,vulkan) builds it")
    if shutil.which("vulkaninfo") is None or "llvmpipe" not in subprocess.run(
            ["vulkaninfo", "--summary"], capture_output=True, text=True, check=False).stdout:
        no_runtime("no lavapipe Vulkan device: `make system-deps` installs Mesa's mesa-vulkan-drivers")
    return folder


# GGML_VK_VISIBLE_DEVICES: let ggml-vulkan use the CPU-type lavapipe device. LP_NATIVE_VECTOR_WIDTH:
# llvmpipe's 256-bit code for one of ggml's shaders took LLVM 15 over 13 minutes to compile here (still
# on the first get_rows); at 128 bits the same load got past it in under a minute. The agent passes
# both to its runtimes, as an operator's driver settings.
LAVAPIPE_ENV = {"GGML_VK_VISIBLE_DEVICES": "0", "LP_NATIVE_VECTOR_WIDTH": "128"}


@pytest.fixture(scope="module")
def lavapipe_visible() -> Iterator[None]:
    before = {name: os.environ.get(name) for name in LAVAPIPE_ENV}
    os.environ.update(LAVAPIPE_ENV)
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def daemon(tmp_path_factory: pytest.TempPathFactory, vulkan_build: Path, lavapipe_visible: None,
                 gemma_gguf: Path) -> AsyncIterator[RunningDaemon]:
    home = tmp_path_factory.mktemp("vulkan") / "home"
    async with running_daemon(home, vulkan_build / "bin" / "llama-server") as rd:
        # The first Vulkan load is silent while lavapipe compiles: allow it that long.
        await rd.client.create_model(model("gemma", str(gemma_gguf), settings={"ctx_size": 1024, "parallel": 1},
                                           startup_timeout_s=FIRST_LOAD_S))
        yield rd


async def _start(rd: RunningDaemon, timeout: float = FIRST_LOAD_S) -> None:
    await rd.client.start_model("gemma")
    status = await rd.wait_state("gemma", ModelState.READY, ModelState.FAILED, timeout=timeout)
    assert status.state == ModelState.READY, (status.error, status.last_log_lines[-20:])


ANSWERS: dict[str, str] = {}  # backend -> Gemma's greedy completion through /v1


async def _answer(rd: RunningDaemon) -> str:
    client = openai.AsyncOpenAI(base_url=rd.v1, api_key="unused", max_retries=0)
    completion = await client.completions.create(model="gemma", prompt="The capital of France is", max_tokens=6,
                                                 temperature=0)
    await client.close()
    return completion.choices[0].text


@pytest.mark.timeout(FIRST_LOAD_S + 300)
async def test_the_agent_picks_vulkan_on_lavapipe_and_serves_gemma_with_every_layer_on_it(
        daemon: RunningDaemon) -> None:
    async def told() -> object:
        node = await daemon.client.get_node("local")
        return node.backend is not None and node

    node = await eventually(told, timeout=60, what="the local agent's backends")
    assert (node.backend_choice, node.backend) == ("auto", Backend.VULKAN), node.backend_why
    offer = next(o for o in node.runtimes if o.runtime == "llamacpp")
    vulkan = next(s for s in offer.backends if s.backend is Backend.VULKAN)
    assert [d.name for d in vulkan.devices] == ["Vulkan0"] and "llvmpipe" in vulkan.devices[0].description
    assert vulkan.devices[0].memory_total_mib > 0

    await _start(daemon)
    status = (await daemon.client.get_model("gemma")).status
    assert status.backend == "vulkan" and status.offload is not None
    assert status.offload.layers_on_gpu == status.offload.layers_total == 19
    assert status.offload.devices == ["Vulkan0"] and status.offload.model_mib["Vulkan0"] > 0
    ANSWERS["vulkan"] = await _answer(daemon)
    assert ANSWERS["vulkan"].strip()

    async def proven() -> bool:
        node = await daemon.client.get_node("local")
        offer = next(o for o in node.runtimes if o.runtime == "llamacpp")
        return any(s.backend is Backend.VULKAN and s.verified for s in offer.backends)

    await eventually(proven, timeout=30, what="the first-sight check's verdict on Vulkan")


@pytest.mark.timeout(FIRST_LOAD_S + 300)
async def test_the_node_set_to_cpu_and_back_takes_effect_at_the_next_start(daemon: RunningDaemon) -> None:
    await daemon.client.set_node_backend("local", "cpu")
    await daemon.client.stop_model("gemma")
    await daemon.wait_state("gemma", ModelState.STOPPED)
    await _start(daemon, timeout=240)
    status = (await daemon.client.get_model("gemma")).status
    assert status.backend == "cpu" and status.offload is not None and status.offload.layers_on_gpu == 0
    ANSWERS["cpu"] = await _answer(daemon)
    if "vulkan" in ANSWERS:  # lavapipe computes what the CPU computes: the same greedy words
        assert ANSWERS["cpu"] == ANSWERS["vulkan"]

    back = await daemon.client.set_node_backend("local", "auto")
    assert back.backend is Backend.VULKAN
    await daemon.client.stop_model("gemma")
    await daemon.wait_state("gemma", ModelState.STOPPED)
    await _start(daemon)  # the pipelines are in Mesa's cache by now
    status = (await daemon.client.get_model("gemma")).status
    assert status.backend == "vulkan" and status.offload is not None and status.offload.layers_on_gpu == 19


CRASHING_MODULE = "#include <signal.h>\n__attribute__((constructor)) static void boom(void) { raise(SIGSEGV); }\n"


def _build_copy(build: Path, into: Path, module: bytes | None = None, source: str | None = None) -> Path:
    """A copy of the build whose Vulkan module is ``module`` (bytes) or compiled from C ``source``."""
    copy = into / build.name
    shutil.copytree(build, copy, symlinks=True)
    target = copy / json.loads((build / "runtime.json").read_text())["backends"]["vulkan"]["module"]
    if source is not None:
        (into / "module.c").write_text(source)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(target), str(into / "module.c")], check=True)
    else:
        target.write_bytes(module or b"")
    return copy


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("module", "source", "words"), [
    (None, CRASHING_MODULE, "was killed by SIGSEGV while listing its devices"),
    (b"not a shared object", None, "does not load"),
])
async def test_a_vulkan_module_that_crashes_or_will_not_load_falls_back_to_the_cpu_with_its_reason(
        tmp_path: Path, vulkan_build: Path, lavapipe_visible: None, gemma_gguf: Path,
        module: bytes | None, source: str | None, words: str) -> None:
    if source is not None and shutil.which("cc") is None:
        no_runtime("no C compiler (cc) to make a crashing module; the runtime build needs one too")
    build = _build_copy(vulkan_build, tmp_path, module, source)
    paths = AgentPaths(tmp_path / "agent").ensure()
    catalog = RuntimeCatalog(build / "bin" / "llama-server", environ={"PATH": ""}, runtime_roots=[])
    manager = InstanceManager(LlamaCppDriver(paths, catalog), ProcessRecords(paths.records_file),
                              free_port_block(4))
    try:
        offer = await manager.driver.offer()
        vulkan = next(s for s in offer.backends if s.backend is Backend.VULKAN)
        assert not vulkan.available and words in (vulkan.reason or ""), vulkan.reason
        await manager.start(make_spec(gemma_gguf, settings={"ctx_size": 512, "parallel": 1}))
        assert await manager.wait_for(lambda: manager.info("m").state in (InstanceState.READY,
                                                                           InstanceState.FAILED), 180)
        info = manager.info("m")
        assert info.state is InstanceState.READY, info.error
        assert info.backend == "cpu" and info.offload is not None and info.offload.layers_on_gpu == 0
    finally:
        runs = list(manager.runs().values())
        await manager.close()
        for run in runs:
            run.process.signal_group(signal.SIGKILL)
            await run.process.wait()
