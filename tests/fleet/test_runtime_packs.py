"""GPU runtime packs: a node with an NVIDIA GPU and a CPU + Vulkan build gets the CUDA pack from the
signed release feed, installed through its agent's build API, and its next start computes on CUDA.

The node is an in-process agent with a fake NVML GPU (driver 580: CUDA 13) whose preferred build is
a portable CPU + Vulkan build of the fake llama-server; the pack is a portable CPU + CUDA build of
the same fake whose CUDA module lists ``CUDA0``. The feed is signed with a key made here and served
on loopback (``tests/updates/release.py``). Bad packs (a wrong checksum, another version's feed, an
unsigned feed) are refused with the check named and leave the node's build as it was.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import stat
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.api.backends import Backend
from agent.api.models import GpuInfo
from agent.api.runtimes import RuntimeOffer
from app.viewmodels.nodes import backend_summary
from core.releases.feed import ReleaseArtefact, ReleaseFeed, feed_bytes
from daemon.api.models import ModelState
from daemon.api.nodes import NodeView
from daemon.api.program import program_version
from daemon.runtimes.packs import cuda_line, pack_need
from mirbadllm.ctl_nodes import fmt_backends
from tests.daemon.harness import RunningDaemon, model
from tests.fakes import fake_runtime_script
from tests.fleet.agents import eventually
from tests.fleet.inprocess import InProcessAgent, pair_online, start_inprocess_agent
from tests.updates.release import ReleaseKey, ReleaseServer

RTX = GpuInfo(index=0, name="NVIDIA GeForce RTX 4090", memory_total=24 << 30, memory_used=1 << 30,
              driver_version="580.95.05", compute_capability="8.9")
CUDA_DEVICE = {"devices": [["CUDA0", "NVIDIA GeForce RTX 4090", 24564, 23000]]}
NO_VULKAN_DEVICE: dict[str, object] = {"devices": []}
PLATFORM = f"llamacpp-cuda13-{platform.system().lower()}-{platform.machine().lower()}"


def write_portable_build(root: Path, name: str, modules: dict[str, dict[str, object]]) -> Path:
    """A ``make runtime``-shaped build (every file's SHA-256 in runtime.json) of the fake llama-server
    with a fake GPU module per backend (the JSON the fake reads through GGML_BACKEND_PATH)."""
    folder = root / name
    server = folder / "bin" / "llama-server"
    server.parent.mkdir(parents=True)
    server.write_text(fake_runtime_script({"token_delay_s": 0.01, "tokens": 4}))
    server.chmod(server.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    backends: dict[str, object] = {"cpu": {"variants": []}}
    for backend, module in modules.items():
        path = folder / "backends" / backend / f"libggml-{backend}.so"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(module))
        backends[backend] = {"module": path.relative_to(folder).as_posix()}
    files = {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(folder.rglob("*")) if p.is_file()}
    (folder / "runtime.json").write_text(json.dumps({
        "format": 1, "runtime": "llamacpp", "version": "11434.0.0", "key": name.rsplit("-", 1)[-1],
        "system": platform.system(), "machine": platform.machine(), "server": "bin/llama-server",
        "backends": backends, "files": files}, indent=2))
    return folder


def tar_gz(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return buffer.getvalue()


def publish(server: ReleaseServer, key: ReleaseKey, pack: bytes, *, version: str | None = None,
            sha256: str | None = None, signed: bool = True) -> None:
    artefact = ReleaseArtefact(platform=PLATFORM, url="pack.tar.gz", size=len(pack),
                               sha256=sha256 or hashlib.sha256(pack).hexdigest())
    feed = feed_bytes(ReleaseFeed(version=version or program_version(), published="2026-12-01T09:00:00Z",
                                  artefacts=[artefact]))
    server.files.update({"feed.json": feed, "pack.tar.gz": pack})
    if signed:
        server.files["feed.json.sig"] = key.sign(feed)
    else:
        server.files.pop("feed.json.sig", None)


@pytest.fixture
async def nvidia_node(tmp_path: Path) -> AsyncIterator[InProcessAgent]:
    """An agent with an NVIDIA GPU whose preferred build is CPU + Vulkan (as the .deb ships it)."""
    home = tmp_path / "agent"
    write_portable_build(home / "runtimes", "llamacpp-11434.0.0-cpuvulkan", {"vulkan": NO_VULKAN_DEVICE})
    (home / "runtimes").mkdir(parents=True, exist_ok=True)
    (home / "runtimes" / "preferred.json").write_text(json.dumps({"build": "llamacpp-11434.0.0-cpuvulkan"}))
    agent = await start_inprocess_agent(home, name="gaming-pc", gpus=[RTX])
    yield agent
    await agent.close()


@pytest.fixture
async def release(tmp_path: Path) -> AsyncIterator[tuple[ReleaseServer, ReleaseKey]]:
    server = ReleaseServer()
    await server.start()
    yield server, ReleaseKey.make(tmp_path)
    await server.close()


async def pack_state(rd: RunningDaemon, node_id: str, *states: str) -> Any:
    async def settled() -> Any:
        pack = (await rd.client.get_node(node_id)).runtime_pack
        return pack if pack is not None and pack.state in states else None
    return await eventually(settled, timeout=60, what=f"the runtime pack {' or '.join(states)}")


def llamacpp(node: NodeView) -> RuntimeOffer:
    return next(o for o in node.runtimes if o.runtime == "llamacpp")


async def test_an_nvidia_node_gets_the_cuda_pack_and_its_next_start_computes_on_cuda(
        rd: RunningDaemon, nvidia_node: InProcessAgent, release: tuple[ReleaseServer, ReleaseKey],
        tmp_path: Path, model_file: Path) -> None:
    server, key = release
    publish(server, key, tar_gz(write_portable_build(tmp_path / "release", "llamacpp-11434.0.0-cuda13",
                                                     {"cuda": CUDA_DEVICE})))
    packs = rd.daemon.runtime_packs
    packs.feed_url, packs.trusted_keys = server.feed_url, (key.public,)
    node_id = await pair_online(rd, nvidia_node)
    await rd.client.create_model(model("m", str(model_file), node=node_id))  # also the smoke test's model

    node = await eventually(lambda: _with_offer(rd, node_id), what="the node's llama.cpp offer")
    assert [s.backend for s in llamacpp(node).backends] == [Backend.CPU, Backend.VULKAN]
    assert node.backend == Backend.CPU, "no Vulkan device, no CUDA module: the CPU"

    packs.poke()
    installed = await pack_state(rd, node_id, "installed", "failed")
    assert installed.state == "installed", installed.message
    assert installed.platform == PLATFORM and "llamacpp-11434.0.0-cuda13 installed" in installed.message
    assert server.hits["pack.tar.gz"] == 1
    assert json.loads((nvidia_node.home / "runtimes" / "preferred.json").read_text())["build"] == \
        "llamacpp-11434.0.0-cuda13"

    async def on_cuda() -> NodeView | None:
        view = await rd.client.get_node(node_id)
        return view if view.backend == Backend.CUDA else None

    node = await eventually(on_cuda, timeout=30, what="the node offering CUDA")
    cuda = next(s for s in llamacpp(node).backends if s.backend == Backend.CUDA)
    assert [d.name for d in cuda.devices] == ["CUDA0"]

    status = await rd.client.start_model("m", wait=True)
    assert status.state == ModelState.READY, status.error
    assert status.backend == "cuda" and status.offload is not None and status.offload.devices == ["CUDA0"]

    packs.poke()  # served once: a node that has CUDA needs no pack, and nothing is fetched again
    await packs.serve_nodes()
    assert server.hits["pack.tar.gz"] == 1
    entries = (await rd.client.audit(action="nodes.runtime_upgrade")).entries
    assert [(e.subject, e.detail) for e in entries] == [(node_id, "llama.cpp llamacpp-11434.0.0-cuda13 (runtime pack)")]


async def test_a_pack_that_does_not_check_out_is_refused_with_the_check_named_and_the_node_keeps_its_build(
        rd: RunningDaemon, nvidia_node: InProcessAgent, release: tuple[ReleaseServer, ReleaseKey],
        tmp_path: Path, model_file: Path) -> None:
    server, key = release
    pack = tar_gz(write_portable_build(tmp_path / "release", "llamacpp-11434.0.0-cuda13", {"cuda": CUDA_DEVICE}))
    packs = rd.daemon.runtime_packs
    packs.trusted_keys = (key.public,)
    node_id = await pair_online(rd, nvidia_node)
    await rd.client.create_model(model("m", str(model_file), node=node_id))
    await eventually(lambda: _with_offer(rd, node_id), what="the node's llama.cpp offer")

    packs.feed_url = ""  # no feed: the node says what it could have
    await packs.serve_nodes()
    off = (await rd.client.get_node(node_id)).runtime_pack
    assert off is not None and off.state == "off" and "no release feed is set" in off.message

    packs.feed_url = server.feed_url
    for broken, check in (({"sha256": "0" * 64}, "Checksum check failed"),
                          ({"version": "0.0.1"}, "Version check failed"),
                          ({"signed": False}, "Signature check failed")):
        publish(server, key, pack, **broken)  # type: ignore[arg-type]
        packs.states.clear()
        await packs.serve_nodes()
        failed = (await rd.client.get_node(node_id)).runtime_pack
        assert failed is not None and failed.state == "failed" and check in failed.message, failed

    node = await rd.client.get_node(node_id)
    assert node.backend == Backend.CPU and all(s.backend != Backend.CUDA for s in llamacpp(node).backends)
    # The Nodes page and `ctl nodes show` say why the GPU is not on CUDA.
    assert "\nRuntime pack: the CUDA 13 runtime pack (NVIDIA driver 580.95.05) was not used: Signature check " \
        "failed" in backend_summary(node)
    assert any(line.startswith("  pack       failed: the CUDA 13 runtime pack") for line in fmt_backends(node))
    assert json.loads((nvidia_node.home / "runtimes" / "preferred.json").read_text())["build"] == \
        "llamacpp-11434.0.0-cpuvulkan"
    assert not list((rd.daemon.paths.home / "runtime-packs").glob("llamacpp-*")), "nothing unpacked"


def test_which_node_needs_which_pack() -> None:
    assert (cuda_line("580.95.05", "linux"), cuda_line("535.183.01", "linux"), cuda_line("470.256", "linux")) == \
        ("13", "12", None)
    assert cuda_line("527.41", "windows") == "12" and cuda_line("garbage", "linux") is None
    vulkan_build = RuntimeOffer(runtime="llamacpp", available=True, backends=[
        {"backend": "cpu", "available": True}, {"backend": "vulkan", "available": False}])
    node = NodeView(id="n", name="pc", os="Linux", arch="x86_64", gpus=[RTX], runtimes=[vulkan_build])
    need = pack_need(node)
    assert need is not None and need.platform == "llamacpp-cuda13-linux-x86_64" and need.line == "13"
    assert pack_need(node.model_copy(update={"backend_choice": "vulkan"})) is None, "the operator chose"
    assert pack_need(node.model_copy(update={"gpus": [RTX.model_copy(update={"driver_version": None})]})) is None
    assert pack_need(node.model_copy(update={"os": "Darwin", "arch": "arm64"})) is None
    with_cuda = vulkan_build.model_copy(update={"backends": [*vulkan_build.backends, vulkan_build.backends[0]
                                                              .model_copy(update={"backend": Backend.CUDA})]})
    assert pack_need(node.model_copy(update={"runtimes": [with_cuda]})) is None
    on_path = vulkan_build.model_copy(update={"backends": []})  # a llama-server on PATH: left as it is
    assert pack_need(node.model_copy(update={"runtimes": [on_path]})) is None


async def _with_offer(rd: RunningDaemon, node_id: str) -> NodeView | None:
    node = await rd.client.get_node(node_id)
    offer = next((o for o in node.runtimes if o.runtime == "llamacpp"), None)
    return node if offer is not None and offer.backends else None
