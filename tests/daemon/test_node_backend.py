"""The per-node backend choice: set over the admin API and ``ctl nodes backend``, kept by the daemon,
sent with every launch; ``/api/nodes`` and ``ctl nodes show`` say which backend runs and why not a
better one. The node's build is the fake llama-server with a fake Vulkan module (tests/fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ModelState
from daemon.api.plan import PlanQuery
from daemon.api.sources import FitQuery
from mirbadllm import ctl, ctl_nodes
from tests.agent._support import eventually
from tests.daemon.harness import model, running_daemon
from tests.fakes import write_fake_build

GPU = {"devices": [["Vulkan0", "Fake Radeon (RADV NAVI33)", 8176, 8000]]}


async def test_the_choice_is_kept_told_to_the_next_start_and_refused_when_the_node_cannot(
        tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build = write_fake_build(tmp_path / "runtimes", {"vulkan": GPU})
    async with running_daemon(tmp_path / "daemon", build / "bin" / "llama-server") as rd:
        async def reported() -> object:
            node = await rd.client.get_node("local")
            return node.backend is not None and node

        node = await eventually(reported, timeout=30, what="the local agent's backends")
        assert (node.backend_choice, node.backend.value, node.backend_why) == ("auto", "vulkan", None)

        await rd.client.create_model(model("m", str(model_file)))
        await rd.client.start_model("m")
        status = await rd.wait_state("m", ModelState.READY)
        assert status.backend == "vulkan" and status.offload is not None
        assert (status.offload.layers_on_gpu, status.offload.devices) == (19, ["Vulkan0"])

        # cpu from ctl: kept, audited, and the next start computes on the CPU (the running one is left alone).
        assert await ctl_nodes.run(ctl.parse_args(["nodes", "backend", "local", "cpu"]), rd.client) == 0
        assert "llama.cpp computes on CPU (choice cpu)" in capsys.readouterr().out
        assert (await rd.client.get_model("m")).status.backend == "vulkan"
        await rd.client.stop_model("m")
        await rd.wait_state("m", ModelState.STOPPED)
        await rd.client.start_model("m")
        status = await rd.wait_state("m", ModelState.READY)
        assert status.backend == "cpu" and status.offload is not None and status.offload.layers_on_gpu == 0
        assert json.loads((tmp_path / "daemon" / "node_backends.json").read_text())["nodes"] == {"local": "cpu"}

        async def proven() -> bool:  # the first Vulkan start proved it; the next status probe says so
            offer = next(o for o in (await rd.client.get_node("local")).runtimes if o.runtime == "llamacpp")
            return any(s.backend.value == "vulkan" and s.verified for s in offer.backends)

        await eventually(proven, timeout=30, what="the Vulkan backend proven")
        assert await ctl_nodes.run(ctl.parse_args(["nodes", "show", "local"]), rd.client) == 0
        shown = capsys.readouterr().out
        assert "backend    CPU (choice cpu)" in shown
        assert "Vulkan   ok       Vulkan0 Fake Radeon (RADV NAVI33) 8176 MiB" in shown

        # Bad input: a fifth value, a node that does not exist, CUDA where the build has none. Nothing changes.
        with pytest.raises(DaemonError) as bad:
            await rd.client.set_node_backend("local", "rocm")
        assert bad.value.status == 422 and "'auto', 'cuda', 'vulkan' or 'cpu'" in bad.value.message
        with pytest.raises(DaemonError) as unknown:
            await rd.client.set_node_backend("no-such-node", "cpu")
        assert unknown.value.status == 422 and unknown.value.code == "node_not_found"
        assert "the nodes: " in unknown.value.message and "(local)" in unknown.value.message
        with pytest.raises(DaemonError) as no_cuda:
            await rd.client.set_node_backend("local", "cuda")
        assert no_cuda.value.status == 422 and no_cuda.value.code == "backend_unavailable"
        assert "its build has no cuda backend" in no_cuda.value.message
        assert "Vulkan: Vulkan0 Fake Radeon (RADV NAVI33) (8176 MiB)" in no_cuda.value.message
        assert (await rd.client.get_node("local")).backend_choice == "cpu"

        back = await rd.client.set_node_backend("local", "auto")
        assert (back.backend_choice, back.backend.value if back.backend else None) == ("auto", "vulkan")
        entries = (await rd.client.audit(action="node.backend")).entries  # newest first
        assert [(e.subject, e.before, e.after) for e in entries] == [("local", "cpu", "auto"), ("local", "auto", "cpu")]


async def test_the_plan_counts_the_devices_of_the_backend_the_node_computes_on(
        tmp_path: Path, model_file: Path) -> None:
    build = write_fake_build(tmp_path / "runtimes", {"vulkan": GPU})
    async with running_daemon(tmp_path / "daemon", build / "bin" / "llama-server") as rd:
        await eventually(lambda: _backend(rd), timeout=30, what="the local agent's backends")
        query = PlanQuery(model_path=str(model_file), node="local")

        on_vulkan = (await rd.client.plan(query)).nodes[0].options
        gpu = next(o for o in on_vulkan if o.kind == "gpu")
        assert [d.device for d in gpu.devices] == ["cpu", "Vulkan0"], "named as the running build names it"
        assert gpu.args[:2] == ["--device", "Vulkan0"]
        assert "CUDA0" not in str(gpu.args)

        await rd.client.set_node_backend("local", "cpu")
        on_cpu = (await rd.client.plan(query)).nodes[0].options
        assert [(o.kind, [d.device for d in o.devices]) for o in on_cpu] == [("cpu", ["cpu"])], \
            "a node that computes on the CPU offers no GPU placement"
        report = await rd.client.fit(FitQuery(model_path=str(model_file), node="local"))
        assert report.gpus == [] and report.estimate.gpu_bytes == []


async def _backend(rd: object) -> bool:
    node = await rd.client.get_node("local")  # type: ignore[attr-defined]
    return node.backend is not None
