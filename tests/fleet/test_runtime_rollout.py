"""llama.cpp builds pinned per model and rolled out from the daemon, one node at a time (two agent processes).

A "build" is a folder as ``make runtime`` writes it (``llamacpp-<version>-<key>/``: ``runtime.json``
listing every file's SHA-256, ``bin/llama-server``, a ggml library and its link), whose server is
the fake llama-server with its switches baked in. Each agent starts with the OLD build as its
rolled-out (preferred) build and no ``--llama-server``, so the catalog runs whatever the rollout
installs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.runtime_builds import LlamaCppBuildOffer
from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from daemon.api.runtime_upgrades import RuntimeRolloutView
from daemon.api.upgrades import NodeUpgradeState, RolloutState
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import fake_runtime_script
from tests.fleet.agents import AgentProcess, eventually
from tests.fleet.test_fleet_loopback import FAST_MONITOR, chat, pair

pytestmark = pytest.mark.slow

OLD, NEW = "0.1.0", "0.2.0"
# What this project's sdist build prints for --version: no build number, so the manifest's version is offered.
SDIST_VERSION = "version: 0.6.0-dev (build 0, commit unknown)"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _machine() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "aarch64": "arm64"}.get(machine, machine)


def write_build(root: Path, version: str, **switches: object) -> Path:
    """A ``make runtime``-shaped build of ``version`` whose server is the fake with ``switches``."""
    folder = root / f"llamacpp-{version}-test"
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    server = bin_dir / "llama-server"
    server.write_text(fake_runtime_script({"version": SDIST_VERSION, "token_delay_s": 0.01, **switches}))
    server.chmod(server.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    (bin_dir / "libggml-base.so.0.1").write_bytes(f"fake ggml of {version}\n".encode())
    (bin_dir / "libggml-base.so.0").symlink_to("libggml-base.so.0.1")
    files = {p.relative_to(folder).as_posix(): _sha256(p) for p in sorted(bin_dir.iterdir()) if not p.is_symlink()}
    manifest = {"format": 1, "runtime": "llamacpp", "version": version, "key": "test", "system": platform.system(),
                "machine": _machine(), "server": "bin/llama-server", "files": files}
    (folder / "runtime.json").write_text(json.dumps(manifest, indent=2))
    return folder


async def agent_with_build(agents: Any, tmp_path: Path, name: str) -> AgentProcess:
    """An agent whose preferred (rolled-out) build is OLD, and no configured llama-server."""
    home = tmp_path / f"agent-{name}"
    write_build(home / "runtimes", OLD)
    (home / "runtimes" / "preferred.json").write_text(json.dumps({"build": f"llamacpp-{OLD}-test"}))
    return await agents(name, home=home, llama_server=None, env={"MIRBADLLM_NO_MDNS": "1"})  # type: ignore[no-any-return]


async def llamacpp_offer(rd: RunningDaemon, node_id: str) -> Any:
    async def fresh() -> Any:
        node = await rd.client.get_node(node_id)
        return next((o for o in node.runtimes if o.runtime == "llamacpp"), None)
    return await eventually(fresh, what=f"node {node_id}'s llama.cpp offer")


async def node_offers(rd: RunningDaemon, node_id: str, version: str) -> Any:
    async def probe() -> Any:
        offer = await llamacpp_offer(rd, node_id)
        return offer if offer.version == f"{version} (runtime.json)" else None
    return await eventually(probe, what=f"node {node_id} offering llama.cpp {version}")


async def start_runtime_upgrade(rd: RunningDaemon, **body: object) -> RuntimeRolloutView:
    return RuntimeRolloutView.model_validate(await rd.client._call("POST", "/api/nodes/runtime-upgrade", body=body))


async def rollout_end(rd: RunningDaemon) -> tuple[RuntimeRolloutView, list[tuple[str, str]]]:
    """Follow the event feed until the rollout finishes; the (node, state) of each runtime_upgrade.node event."""
    since, seen = 0, []
    while True:
        page = await rd.client.events(since, timeout=10)
        since = page.last_id
        for event in page.events:
            if event.type == "runtime_upgrade.node":
                seen.append((event.data["node"], event.data["state"]))
            if event.type == "runtime_upgrade.finished":
                view = RuntimeRolloutView.model_validate(await rd.client._call("GET", "/api/nodes/runtime-upgrade"))
                return view, seen


async def start_ready(rd: RunningDaemon, model_id: str) -> Any:
    status = await rd.client.start_model(model_id, wait=True)
    assert status.state == ModelState.READY and status.pid, status.error
    return status


def preferred(agent: AgentProcess) -> str:
    return str(json.loads((agent.home / "runtimes" / "preferred.json").read_text())["build"])


async def test_a_pinned_model_is_refused_by_a_node_with_another_build_naming_both(
        agents: Any, tmp_path: Path, model_file: Path) -> None:
    alpha = await agent_with_build(agents, tmp_path, "alpha")
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        node = await pair(rd, alpha)
        offer = await node_offers(rd, node, OLD)
        await rd.client.create_model(model("pinned-new", str(model_file), node=node, runtime_version=NEW))
        with pytest.raises(DaemonError) as refused:
            await rd.client.start_model("pinned-new", wait=True)
        assert refused.value.status == 409 and refused.value.code == "runtime_version_mismatch"
        assert f"llama.cpp {OLD}" in refused.value.message and f"pinned to {NEW}" in refused.value.message
        assert alpha.runtime_pids() == []

        # The version it runs, or a prefix of its fingerprint, is a pin it honours.
        await rd.client.create_model(model("pinned-old", str(model_file), node=node, runtime_version=OLD))
        await start_ready(rd, "pinned-old")
        await rd.client.create_model(model("pinned-digest", str(model_file), node=node,
                                           runtime_version=f"sha256:{offer.digest[:12]}"))
        await start_ready(rd, "pinned-digest")
        await rd.client.create_model(model("pinned-short", str(model_file), node=node,
                                           runtime_version=offer.digest[:4]))
        with pytest.raises(DaemonError) as short:
            await rd.client.start_model("pinned-short", wait=True)
        assert short.value.code == "runtime_version_mismatch"  # four hex digits name no build


async def test_a_build_is_rolled_out_one_node_at_a_time_and_pins_follow(
        agents: Any, tmp_path: Path, model_file: Path) -> None:
    alpha, beta = await asyncio.gather(agent_with_build(agents, tmp_path, "alpha"),
                                       agent_with_build(agents, tmp_path, "beta"))
    new_build = write_build(tmp_path / "release", NEW)
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        ids = {"alpha": await pair(rd, alpha), "beta": await pair(rd, beta)}
        a, b = ids["alpha"], ids["beta"]
        async def start(name: str, node_id: str) -> int:  # the smoke test loads each node's registered model file
            await rd.client.create_model(model(f"on-{name}", str(model_file), node=node_id))
            return int((await start_ready(rd, f"on-{name}")).pid)

        pids = dict(zip(ids, await asyncio.gather(*(start(name, node_id) for name, node_id in ids.items())),
                        strict=True))

        started = await start_runtime_upgrade(rd, folder=str(new_build))
        assert started.state == RolloutState.RUNNING and started.build == new_build.name and started.version == NEW
        view, seen = await rollout_end(rd)

        assert view.state == RolloutState.DONE, view.reason
        assert seen == [(a, "upgrading"), (a, "done"), (b, "upgrading"), (b, "done")]  # beta only after alpha
        assert [(n.name, n.state) for n in view.nodes] == [("alpha", NodeUpgradeState.DONE),
                                                           ("beta", NodeUpgradeState.DONE)]
        assert all(f"llama.cpp {OLD}" in n.from_version for n in view.nodes)
        for name, node_id in ids.items():
            offer = await node_offers(rd, node_id, NEW)
            assert view.wanted[node_id].build == new_build.name and view.wanted[node_id].digest == offer.digest
            agent = alpha if name == "alpha" else beta
            assert preferred(agent) == new_build.name
            assert sorted(p.name for p in (agent.home / "runtimes").iterdir() if p.is_dir()) == [
                f"llamacpp-{OLD}-test", new_build.name]  # beside the old one, never over it
            assert (await rd.client.get_model(f"on-{name}")).status.pid == pids[name]  # running models untouched
        kept = json.loads((rd.daemon.paths.home / "runtime-builds.json").read_text())
        assert {k: v["version"] for k, v in kept.items()} == {a: NEW, b: NEW}

        # A model pinned to the new build now starts on a node that has it.
        await rd.client.create_model(model("pinned-new", str(model_file), node=a, runtime_version=NEW))
        await start_ready(rd, "pinned-new")


async def test_a_tampered_build_is_refused_before_use(agents: Any, tmp_path: Path, model_file: Path) -> None:
    alpha = await agent_with_build(agents, tmp_path, "alpha")
    tampered = write_build(tmp_path / "release", NEW)
    (tampered / "bin" / "libggml-base.so.0.1").write_bytes(b"changed after the build was made\n")
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        node = await pair(rd, alpha)
        await node_offers(rd, node, OLD)

        # The daemon checks the folder before it sends a byte.
        with pytest.raises(DaemonError) as refused:
            await start_runtime_upgrade(rd, folder=str(tampered), smoke_model=str(model_file))
        assert refused.value.status == 422 and refused.value.code == "runtime_build_refused"
        assert "bin/libggml-base.so.0.1" in refused.value.message

        # The agent checks every file again: the same archive, pushed as a daemon that skipped its check would.
        archive = tmp_path / "tampered.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(tampered, arcname=tampered.name)
        offer = LlamaCppBuildOffer(name=tampered.name, version=NEW, size=archive.stat().st_size,
                                   sha256=_sha256(archive), smoke_model=str(model_file))
        link = rd.daemon.links.get(node)
        assert link is not None
        with pytest.raises(AgentError) as agent_refused:
            await link.client.runtime_build(offer, archive)
        assert agent_refused.value.status == 422 and agent_refused.value.code == "runtime_build_refused"
        assert "bin/libggml-base.so.0.1" in agent_refused.value.message
        assert sorted(os.listdir(alpha.home / "runtimes")) == [f"llamacpp-{OLD}-test", "preferred.json"]
        assert preferred(alpha) == f"llamacpp-{OLD}-test"
        assert (await llamacpp_offer(rd, node)).version == f"{OLD} (runtime.json)"


async def test_a_build_that_fails_its_smoke_test_is_rolled_back_and_the_old_one_serves(
        agents: Any, tmp_path: Path, model_file: Path) -> None:
    alpha, beta = await asyncio.gather(agent_with_build(agents, tmp_path, "alpha"),
                                       agent_with_build(agents, tmp_path, "beta"))
    bad = write_build(tmp_path / "release", NEW, exit_code=1)  # the fake's crash switch: dies at start
    async with running_daemon(tmp_path / "daemon", None, local_agent=False, nodes=FAST_MONITOR) as rd:
        ids = {"alpha": await pair(rd, alpha), "beta": await pair(rd, beta)}
        a = ids["alpha"]
        await rd.client.create_model(model("on-alpha", str(model_file), node=a))
        before = await start_ready(rd, "on-alpha")

        await start_runtime_upgrade(rd, folder=str(bad), smoke_model=str(model_file))
        view, seen = await rollout_end(rd)

        assert view.state == RolloutState.FAILED
        assert view.reason is not None and "node alpha" in view.reason and "smoke test failed" in view.reason
        assert [(n.name, n.state) for n in view.nodes] == [("alpha", NodeUpgradeState.FAILED),
                                                           ("beta", NodeUpgradeState.PENDING)]
        assert seen == [(a, "upgrading"), (a, "failed")]  # beta was never told
        assert view.wanted == {}
        for agent in (alpha, beta):
            assert preferred(agent) == f"llamacpp-{OLD}-test"
            assert not (agent.home / "runtimes" / bad.name).exists()  # the new build removed
        assert (await llamacpp_offer(rd, a)).version == f"{OLD} (runtime.json)"

        # The old build still serves: the running model answers, and a fresh start runs the old build.
        code, _ = await chat(rd, "on-alpha")
        assert code == 200 and (await rd.client.get_model("on-alpha")).status.pid == before.pid
        await rd.client.stop_model("on-alpha")
        await rd.client.create_model(model("pinned-old", str(model_file), node=a, runtime_version=OLD))
        await start_ready(rd, "pinned-old")
