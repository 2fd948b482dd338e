"""A model is placed only on a node that offers its runtime; ``/api/nodes`` says what each node offers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agent.api.runtimes import RuntimeOffer
from daemon.api.client import DaemonError
from daemon.models.registry import Registry, RegistryError, runtime_refusal
from tests.agent._support import eventually
from tests.daemon.harness import model, running_daemon

LLAMACPP = RuntimeOffer(runtime="llamacpp", available=True, version="b4242 (fa4e1234)", location="/bin/llama-server")
NO_VLLM = RuntimeOffer(runtime="vllm", available=False, reason="no Docker engine answers on this node")
NO_MLX = RuntimeOffer(runtime="mlx", available=False, reason="MLX needs Apple Silicon")


def test_the_refusal_names_the_node_the_runtime_its_reason_and_what_it_offers() -> None:
    offers = [LLAMACPP, NO_VLLM, NO_MLX]
    assert runtime_refusal(model("a"), "alpha", offers) is None
    assert runtime_refusal(model("v", runtime="vllm"), "alpha", offers) == (
        "node 'alpha' has no vLLM: no Docker engine answers on this node; it offers llama.cpp")
    assert runtime_refusal(model("m", runtime="mlx"), "alpha", [LLAMACPP]) == (
        "node 'alpha' has no MLX: its agent has no MLX driver; it offers llama.cpp")
    none = [LLAMACPP.model_copy(update={"available": False, "reason": "no llama-server found"})]
    assert runtime_refusal(model("a"), "alpha", none) == (
        "node 'alpha' has no llama.cpp: no llama-server found; it offers no runtime")


async def test_a_node_that_does_not_report_does_not_block_saving(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "models.json")
    reports: dict[str, list[RuntimeOffer] | None] = {"local": None}  # offline, or not yet in first contact
    registry.known_nodes = lambda: {"local": "workstation"}
    registry.node_offers = reports.get
    await registry.add(model("v", runtime="vllm"))
    reports["local"] = [LLAMACPP, NO_VLLM]
    with pytest.raises(RegistryError) as refused:
        await registry.add(model("w", runtime="vllm"))
    assert (refused.value.status, refused.value.code) == (422, "runtime_unavailable")
    assert refused.value.message == ("node 'workstation' has no vLLM: no Docker engine answers on this node; "
                                     "it offers llama.cpp")
    assert [d.id for d in registry.all()] == ["v"]


async def test_nodes_carry_their_runtimes_and_placement_follows_them(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        async def local_runtimes() -> list[RuntimeOffer]:
            return next(n for n in await rd.client.list_nodes() if n.local).runtimes

        offers = {o.runtime: o for o in await eventually(local_runtimes, what="the local agent's offers")}
        assert offers["llamacpp"].available and offers["llamacpp"].version == "b4242 (fa4e1234)"
        assert offers["llamacpp"].location == str(Path(fake_runtime).absolute())
        vllm = offers.get("vllm")

        with pytest.raises(DaemonError) as refused:
            await rd.client.create_model(model("v", str(model_file), runtime="vllm"))
        assert (refused.value.status, refused.value.code) == (422, "runtime_unavailable")
        reason = vllm.reason if vllm is not None else "its agent has no vLLM driver"
        assert refused.value.message.startswith(f"node '{socket.gethostname()}' has no vLLM: {reason}")
        assert refused.value.message.endswith("; it offers llama.cpp")
        assert [m.definition.id for m in await rd.client.list_models()] == []
        assert (await rd.client.create_model(model("here", str(model_file)))).definition.runtime == "llamacpp"

        # Saved while the node said nothing (the seam off): its start is refused, the agent not asked.
        offers_seam, rd.daemon.registry.node_offers = rd.daemon.registry.node_offers, None
        await rd.client.create_model(model("v", str(model_file), runtime="vllm"))
        rd.daemon.registry.node_offers = offers_seam
        with pytest.raises(DaemonError) as not_started:
            await rd.client.start_model("v")
        assert (not_started.value.status, not_started.value.code) == (409, "runtime_unavailable")
        assert f"has no vLLM: {reason}; it offers llama.cpp" in not_started.value.message
        assert "v" not in {i.instance_id for i in rd.daemon.links.get("local").instances.values()}
