"""The plan of a split across nodes and its start size each helper's share one way
(``daemon.models.split_room.helper_shares``): what the plan gives a helper is what its grant
lends when the model starts, compute buffer included, so a split the plan says fits now starts.

The pure cut is asserted with made-up figures; the whole path with the real daemon, two real
in-process agents (no GPU, 6 GiB of memory free each, the fake llama-server and the fake
ggml-rpc-server beside it) and a model file too big for either alone.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.api.llamacpp import LlamaCppSettings
from agent.api.plan import DeviceUse, NodePlan, PlanOption, SplitFigures
from agent.api.sources import GgufSummary
from agent.gguf_facts import summarize
from agent.gguf_reader import read_header
from agent.placement import split_figures
from agent.rpc.main_share import main_share
from daemon.api.models import ModelState
from daemon.api.plan import PlanQuery
from daemon.models.split_room import helper_shares, remote_of
from daemon.sources.plan import NodePool, across_nodes
from tests.agent.test_rpc_peers import write_fake_rpc_server
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.fake_memory import FakeMemoryProbe, GiB
from tests.fakes.gguf_files import write_gguf
from tests.fakes.ports import free_port_block
from tests.fleet.inprocess import InProcessAgent, pair_online, start_inprocess_agent

MiB = 1 << 20
BIG = {"layers": 32, "embd": 4096, "heads": 32, "kv_heads": 32, "ctx": 32768, "tensor_dim": 32}
CTX = 16384  # 8 GiB of layers and KV cache: more than either node has free, within both together

# --- the cut, with made-up figures: 4 layers of 1 GiB, the main keeps 512 MiB, the buffer 256 MiB --------
FIGURES = SplitFigures(ctx_size=2048, layer_bytes=[GiB] * 4, main_bytes=512 * MiB, offload_bytes=256 * MiB)


def _main(free: int) -> NodePlan:
    cpu = DeviceUse(device="cpu", needed_bytes=5 * GiB, free_bytes=free, capacity_bytes=8 * GiB)
    option = PlanOption(kind="cpu", label="CPU", state="too_big", ctx_size=2048, max_ctx_size=0,
                        max_ctx_size_empty=0, devices=[cpu])
    summary = GgufSummary(architecture="llama", file_size=4 * GiB, tensor_bytes=4 * GiB, tensor_count=40,
                          block_count=4)
    return NodePlan(node="main", source="/m/big.gguf", summary=summary, options=[option], split=[FIGURES])


def _pools(main_free: int, helper_free: int) -> dict[str, NodePool]:
    return {"main": NodePool("main", True, main_free, 8 * GiB, "cpu", main_free, 8 * GiB),
            "helper": NodePool("helper", True, helper_free, 8 * GiB, "cpu", helper_free, 8 * GiB)}


def test_a_helper_is_never_given_layers_without_room_for_the_buffer_its_grant_lends_too() -> None:
    # 2 GiB of layers fit the helper's 2.125 GiB, but not with the 256 MiB buffer its grant lends with them
    (tight,) = across_nodes([_main(5 * GiB // 2)], _pools(5 * GiB // 2, 17 * GiB // 8))
    assert tight.state == "needs_room", "the main keeps only 2 layers now: the helper would need 2.25 GiB"
    # room on the main for one more layer: it keeps 3, the helper takes 1 and its buffer
    (moved,) = across_nodes([_main(7 * GiB // 2)], _pools(7 * GiB // 2, 17 * GiB // 8))
    assert moved.state == "free"
    assert [(s.node, s.layers, s.needed_bytes) for s in moved.shares] == [
        ("main", 3, 3 * GiB + 512 * MiB), ("helper", 1, GiB + 256 * MiB)]
    # the helper's share is the one sizing the start lends: helper_shares of what the main sends away
    assert moved.shares[1].needed_bytes == helper_shares(remote_of(FIGURES, 1), moved.settings, 1)[0]


def test_with_several_helpers_each_is_held_to_its_tensor_split_share() -> None:
    pools = {**_pools(GiB, 17 * GiB // 8), "third": NodePool("third", True, 17 * GiB // 8, 8 * GiB, "cpu",
                                                              17 * GiB // 8, 8 * GiB)}
    (option,) = across_nodes([_main(GiB)], pools)  # the main keeps no layer: 4 GiB over two helpers
    assert option.state == "free" and option.settings.tensor_split == "2,2"
    lends = helper_shares(remote_of(FIGURES, 4), option.settings, 2)
    assert [s.needed_bytes for s in option.shares[1:]] == lends == [2 * GiB + 128 * MiB] * 2
    assert all(s.needed_bytes <= s.free_bytes for s in option.shares)


def test_the_figures_give_what_the_main_agent_says_goes_to_the_helpers(tmp_path: Path) -> None:
    """The plan's ``remote_of`` and the start's ``FitReport.remote_bytes`` are the same bytes."""
    summary = summarize(read_header(write_gguf(tmp_path / "big.gguf", **BIG)))
    for ctx in (4096, CTX):
        (figures,) = split_figures(summary, LlamaCppSettings(ctx_size=ctx))
        for offloaded in (1, 18, 32):
            for helpers in (1, 2):
                settings = LlamaCppSettings(ctx_size=ctx, n_gpu_layers=offloaded)
                assert remote_of(figures, offloaded) - main_share(summary, settings, helpers).remote_bytes in range(
                    helpers), "the same bytes (less what each device's share rounds off)"


# --- the whole path: plan, save, start -------------------------------------------------------------------


@dataclass
class Pair:
    rd: RunningDaemon
    agents: dict[str, InProcessAgent]  # by node id
    file: Path


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    async with running_daemon(tmp_path / "daemon", None, local_agent=False,
                              nodes={"interval_s": 0.5, "probe_timeout_s": 1.0}) as rd:
        agents: dict[str, InProcessAgent] = {}
        try:
            for name in ("tower", "laptop"):
                runtime = write_fake_runtime(tmp_path / f"runtime-{name}")
                write_fake_rpc_server(runtime.parent)  # beside its llama-server, where the catalog looks
                agent = await start_inprocess_agent(tmp_path / name, name=name, llama_server=runtime,
                                                    memory_probe=FakeMemoryProbe(total=8 * GiB, available=6 * GiB),
                                                    first_port=free_port_block(20))
                agents[await pair_online(rd, agent)] = agent
            yield Pair(rd, agents, write_gguf(tmp_path / "models" / "big-Q4_K_M.gguf", **BIG))
        finally:
            for agent in agents.values():
                await agent.close()


async def test_a_split_the_plan_says_fits_now_starts_with_each_helper_lending_its_planned_share(pair: Pair) -> None:
    client = pair.rd.client
    plan = await client.plan(PlanQuery(model_path=str(pair.file), ctx_size=CTX))
    assert all(o.state == "too_big" for n in plan.nodes for o in n.options), "neither node holds it alone"
    (split,) = plan.fleet
    assert (split.state, split.ctx_size) == ("free", CTX), split.message
    main, helper = split.shares
    assert helper.needed_bytes <= helper.free_bytes == 6 * GiB, "held to the memory the helper's agent checks"
    await client.create_model(model("big", str(pair.file), node=split.node, rpc_nodes=split.rpc_nodes,
                                    settings=split.settings,
                                    memory_budget_gib=math.ceil(main.needed_bytes * 100 / GiB) / 100))

    started = await client.start_model("big", wait=True)
    try:
        assert started.state == ModelState.READY, started.error
        assert [(h.node, h.state) for h in started.rpc_helpers] == [(helper.node, "ready")]
        (grant,) = pair.agents[helper.node].deps[-1].rpc.list()  # type: ignore[union-attr]
        assert grant.memory_bytes == helper.needed_bytes, "the grant lends what the plan gave the helper"
    finally:
        await client.stop_model("big")
