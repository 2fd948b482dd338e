"""``POST /api/plan``: each node's plan merged over the fleet (pure merge and fan-out with fake
agents), and through the real daemon and its local agent child."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.llamacpp import LlamaCppSettings
from agent.api.models import AgentStatus
from agent.api.sources import FitRequest, GgufSummary, HfFileRef
from daemon.api.client import DaemonError
from daemon.api.plan import (
    DeviceUse,
    NodePlan,
    NodePlanError,
    NodeShare,
    Plan,
    PlanOption,
    PlanQuery,
    SplitFigures,
)
from daemon.sources.plan import (
    NodePool,
    across_nodes,
    agent_request,
    cut_layers,
    fan_out,
    merge,
)
from tests.daemon.harness import running_daemon

SUMMARY = GgufSummary(architecture="llama", file_size=100, tensor_bytes=90, tensor_count=3, block_count=2)


def _option(kind: str, state: str, ctx: int = 4096, gpus: list[int] | None = None) -> PlanOption:
    return PlanOption(kind=kind, label=kind, state=state, ctx_size=ctx, max_ctx_size=ctx,  # type: ignore[arg-type]
                      max_ctx_size_empty=ctx, gpus=gpus or [])


def _node(*options: PlanOption, source: str = "/m/a.gguf") -> NodePlan:
    return NodePlan(source=source, summary=SUMMARY, options=list(options))


class FakeAgent:
    """An agent's plan call: its answer, or the error it fails with; the requests it was sent; its
    status (memory, rpc-server) when it has one."""

    def __init__(self, answer: NodePlan | AgentError, status: AgentStatus | None = None) -> None:
        self.answer = answer
        self.requests: list[FitRequest] = []
        self._status = status

    async def status(self) -> AgentStatus:
        if self._status is None:
            raise AgentError(0, "unreachable", "no status")
        return self._status

    async def plan(self, request: FitRequest) -> NodePlan:
        self.requests.append(request)
        if isinstance(self.answer, AgentError):
            raise self.answer
        return self.answer


def _clients(**agents: FakeAgent) -> list[tuple[str, AgentClient]]:
    return [(node, cast(AgentClient, agent)) for node, agent in agents.items()]


def test_the_agents_request_carries_the_context_asked_in_its_settings() -> None:
    query = PlanQuery(model_path="/m/a.gguf", ctx_size=8192, settings=LlamaCppSettings(threads=4), token="t")
    request = agent_request(query)
    assert (request.model_path, request.settings.ctx_size, request.settings.threads, request.token) == (
        "/m/a.gguf", 8192, 4, "t")
    assert agent_request(PlanQuery(hf=HfFileRef(repo="a/b", quant="Q4_K_M"))).settings.ctx_size is None


def test_a_plan_query_is_checked() -> None:
    for bad in ({"ctx_size": 10}, {"surprise": 1}, {"node": "x" * 201}):
        with pytest.raises(ValueError):
            PlanQuery.model_validate(bad)


def test_merge_names_each_options_node_and_adds_across_nodes_only_for_several() -> None:
    one = merge([_node(_option("gpu", "free")).model_copy(update={"node": "a"})], [])
    assert [o.node for o in one.options()] == ["a"] and one.fleet == [] and one.source == "/m/a.gguf"
    two = merge([_node(_option("gpu", "free")).model_copy(update={"node": "a"}),
                 _node(_option("cpu", "needs_room")).model_copy(update={"node": "b"})],
                [NodePlanError(node="c", code="node_offline", message="offline")])
    assert [(o.node, o.kind) for o in two.options()] == [("a", "gpu"), ("b", "cpu"), ("", "nodes")]
    (rpc,) = two.fleet  # one node holds it alone: no split is offered
    assert (rpc.state, rpc.label) == ("unavailable", "across nodes (llama.cpp RPC)")
    assert rpc.message == "not needed: it runs on node a alone (gpu), faster than over the network"
    assert [e.node for e in two.errors] == ["c"] and two.summary == SUMMARY
    assert merge([], []).summary is None and across_nodes([]) == []


def test_the_best_option_fits_now_before_one_that_needs_room() -> None:
    plan = Plan(nodes=[_node(_option("cpu", "free", 2048), _option("gpu", "needs_room", 8192)).model_copy(
                    update={"node": "a"}),
                       _node(_option("split", "free", 1024), _option("gpu", "too_big")).model_copy(update={"node": "b"})])
    best = plan.best()
    assert best is not None and best.kind == "split"  # of those free now, the faster placement
    crowded = Plan(nodes=[_node(_option("cpu", "needs_room"), _option("gpu", "too_big"))])
    assert crowded.best() is not None and crowded.best().kind == "cpu"  # type: ignore[union-attr]
    assert Plan(nodes=[_node(_option("gpu", "too_big"))]).best() is None


async def test_fan_out_asks_every_node_and_lists_the_ones_that_failed() -> None:
    good = FakeAgent(_node(_option("gpu", "free", gpus=[0])))
    missing = FakeAgent(AgentError(422, "invalid_model_file", "cannot read a.gguf"))
    request = FitRequest(model_path="/m/a.gguf")
    plan = await fan_out(_clients(a=good, b=missing), request,
                         [NodePlanError(node="c", code="node_offline", message="offline")])
    assert good.requests == missing.requests == [request]
    assert [n.node for n in plan.nodes] == ["a"] and plan.nodes[0].options[0].node == "a"
    assert [(e.node, e.code) for e in plan.errors] == [("c", "node_offline"), ("b", "invalid_model_file")]
    assert plan.fleet == []  # one node answered: nothing to share across


async def test_fan_out_raises_when_no_node_could_plan() -> None:
    with pytest.raises(AgentError) as caught:
        await fan_out(_clients(a=FakeAgent(AgentError(404, "not_found", "no such repo"))), FitRequest(model_path="/x"))
    assert (caught.value.status, caught.value.code) == (404, "not_found")


async def test_plan_through_the_daemon_and_its_local_agent(tmp_path: Path, fake_runtime: Path,
                                                           model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        plan = await d.client.plan(PlanQuery(model_path=str(model_file), ctx_size=1024))
        assert [n.node for n in plan.nodes] == ["local"] and plan.errors == [] and plan.fleet == []
        options = plan.options()
        assert options and all(o.node == "local" and o.ctx_size == 1024 for o in options)
        assert plan.best() is not None and plan.best().state == "free"  # type: ignore[union-attr]
        assert plan.summary is not None and plan.source == str(model_file)
        same = await d.client.plan(PlanQuery(node="local", model_path=str(model_file)))
        assert [o.kind for o in same.options()] == [o.kind for o in options]
        for query, code in ((PlanQuery(node="elsewhere", model_path=str(model_file)), "node_unknown"),
                            (PlanQuery(), "invalid_request"),
                            (PlanQuery(model_path=str(tmp_path / "missing.gguf")), "invalid_model_file")):
            with pytest.raises(DaemonError) as caught:
                await d.client.plan(query)
            assert caught.value.code == code, query
        body: dict[str, Any] = {"model_path": str(model_file), "surprise": 1}
        async with d.client.session.post(f"{d.url}/api/plan", json=body,
                                         headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as resp:
            assert resp.status == 422 and "error" in await resp.json()


# --- across nodes (llama.cpp RPC): the split as a pure function -----------------------------------

GiB = 1 << 30
MiB = 1 << 20
# 4 layers, each 1 GiB at 2K, 1.25 GiB at 4K, 1.5 GiB at 8K (weights and KV); the main keeps 512 MiB.
LADDER = [SplitFigures(ctx_size=ctx, layer_bytes=[size] * 4, main_bytes=512 * MiB)
          for ctx, size in ((2048, GiB), (4096, 5 * GiB // 4), (8192, 3 * GiB // 2))]


def _cpu_node(node: str, free: int, capacity: int) -> NodePlan:
    """A CPU-only node with the file, too small alone."""
    cpu = DeviceUse(device="cpu", needed_bytes=9 * GiB // 2, free_bytes=free, capacity_bytes=capacity)
    option = PlanOption(kind="cpu", label="CPU", state="too_big", ctx_size=2048, max_ctx_size=0,
                        max_ctx_size_empty=0, devices=[cpu])
    return NodePlan(node=node, source="/m/big.gguf", summary=SUMMARY, options=[option], split=LADDER)


def _pools(**nodes: tuple[int, int, bool]) -> dict[str, NodePool]:
    return {n: NodePool(n, lends, free, cap, "cpu", free, cap) for n, (free, cap, lends) in nodes.items()}


def _rows(option: PlanOption) -> list[tuple[str, str, int, float, float]]:
    return [(s.node, s.role, s.layers, s.needed_bytes / GiB, s.free_bytes / GiB) for s in option.shares]


def test_layers_are_cut_in_proportion_to_room_else_in_order() -> None:
    assert cut_layers([GiB] * 4, [2 * GiB, 5 * GiB // 2]) == [2, 2]
    assert cut_layers([GiB] * 4, [2 * GiB, 3 * GiB // 2, 3 * GiB // 2]) == [2, 1, 1]
    assert cut_layers([GiB] * 4, [3 * GiB, GiB]) == [3, 1]
    assert cut_layers([GiB] * 4, [2 * GiB, GiB]) is None  # 4 GiB of layers, 3 GiB of room
    assert cut_layers([GiB] * 4, [-1, 8 * GiB]) is None  # the main cannot keep its own part


def test_a_model_no_node_holds_runs_across_two_in_the_memory_free_now() -> None:
    pools = _pools(a=(5 * GiB // 2, 4 * GiB, True), b=(5 * GiB // 2, 4 * GiB, True), c=(8 * GiB, 8 * GiB, False))
    (option,) = across_nodes([_cpu_node("a", 5 * GiB // 2, 4 * GiB)], pools)
    assert (option.kind, option.node, option.state, option.rpc_nodes) == ("nodes", "a", "free", ["b"])
    assert (option.ctx_size, option.max_ctx_size, option.max_ctx_size_empty) == (2048, 2048, 8192)
    # the main keeps the first 2 layers and its 0.5 GiB; the helper's rpc-server holds the last 2
    assert _rows(option) == [("a", "main", 2, 2.5, 2.5), ("b", "helper", 2, 2.0, 2.5)]
    assert option.args == ["--ctx-size", "2048", "--n-gpu-layers", "2"]
    assert (option.settings.ctx_size, option.settings.n_gpu_layers, option.settings.gpus) == (2048, 2, None)
    assert option.label == "across 2 nodes over llama.cpp RPC (2 on a + 2 on b layers)"
    assert option.message.startswith("fits in the memory free now over 2 nodes, with a context of 2048 tokens")


def test_this_machines_agent_may_be_the_main_but_never_a_helper() -> None:
    pools = _pools(local=(5 * GiB // 2, 4 * GiB, True), b=(5 * GiB // 2, 4 * GiB, True))
    (here,) = across_nodes([_cpu_node("local", 5 * GiB // 2, 4 * GiB)], pools)
    assert (here.node, here.state, here.rpc_nodes) == ("local", "free", ["b"])
    # with the file elsewhere, the local agent (loopback only, the most room) is not offered as a helper
    pools = _pools(a=(5 * GiB // 2, 4 * GiB, True), local=(8 * GiB, 8 * GiB, True), b=(5 * GiB // 2, 4 * GiB, True))
    (there,) = across_nodes([_cpu_node("a", 5 * GiB // 2, 4 * GiB)], pools)
    assert (there.node, there.rpc_nodes) == ("a", ["b"])


def test_a_split_that_fits_once_room_is_made_says_where() -> None:
    pools = _pools(a=(5 * GiB // 2, 4 * GiB, True), b=(GiB, 4 * GiB, True))
    (option,) = across_nodes([_cpu_node("a", 5 * GiB // 2, 4 * GiB)], pools)
    assert (option.state, option.ctx_size, option.max_ctx_size, option.max_ctx_size_empty) == (
        "needs_room", 8192, 0, 8192)
    assert _rows(option) == [("a", "main", 2, 3.5, 2.5), ("b", "helper", 2, 3.0, 1.0)]
    assert option.message == "fits once room is made: 1.0 GiB more on a, 2.0 GiB more on b"


def test_more_helpers_are_taken_only_when_one_is_not_enough() -> None:
    pools = _pools(a=(5 * GiB // 2, 4 * GiB, True), b=(3 * GiB // 2, 4 * GiB, True), d=(3 * GiB // 2, 4 * GiB, True))
    (option,) = across_nodes([_cpu_node("a", 5 * GiB // 2, 4 * GiB)], pools)
    assert (option.state, option.rpc_nodes, option.ctx_size) == ("free", ["b", "d"], 2048)
    assert _rows(option) == [("a", "main", 2, 2.5, 2.5), ("b", "helper", 1, 1.0, 1.5), ("d", "helper", 1, 1.0, 1.5)]
    assert option.args == ["--ctx-size", "2048", "--n-gpu-layers", "2", "--tensor-split", "1,1"]
    assert option.settings.tensor_split == "1,1"  # one RPC device per helper, in rpc_nodes order


def test_too_big_even_together_and_the_cases_with_no_split() -> None:
    small = _pools(a=(5 * GiB // 2, 5 * GiB // 2, True), b=(GiB, GiB, True))
    (option,) = across_nodes([_cpu_node("a", 5 * GiB // 2, 5 * GiB // 2)], small)
    assert (option.state, option.ctx_size, option.max_ctx_size_empty) == ("too_big", 2048, 0)
    assert option.message == "too big even for these nodes' memory together: it needs 4.5 GiB of 3.5 GiB"
    main = _cpu_node("a", 5 * GiB // 2, 4 * GiB)
    for pools, words in ((_pools(a=(GiB, GiB, False), b=(8 * GiB, 8 * GiB, True)), "no node with the file has"),
                         (_pools(a=(GiB, GiB, True), b=(8 * GiB, 8 * GiB, False)), "no other node has"),):
        (none,) = across_nodes([main], pools)
        assert none.state == "unavailable" and none.message.startswith(words), none.message
    (old,) = across_nodes([main.model_copy(update={"split": []})], _pools(a=(GiB, GiB, True), b=(GiB, GiB, True)))
    assert old.state == "unavailable" and "give no figures" in old.message
    assert across_nodes([main], _pools(a=(GiB, GiB, True))) == []  # one node: nothing to share


async def test_fan_out_asks_each_nodes_memory_for_a_split_even_without_the_file() -> None:
    def status(free: int, rpc: str | None) -> AgentStatus:
        return AgentStatus.model_validate({"node_id": "x", "hostname": "h", "os": "linux", "arch": "x86_64",
                                           "version": "1", "cpu_count": 4, "memory_total": 4 * GiB, "memory_available": free,
                                           "rpc_server": rpc})
    main = FakeAgent(_cpu_node("a", 5 * GiB // 2, 4 * GiB), status(5 * GiB // 2, "/rt/bin/ggml-rpc-server"))
    helper = FakeAgent(AgentError(422, "invalid_model_file", "no such file"), status(5 * GiB // 2, "/x"))
    plan = await fan_out(_clients(a=main, b=helper), FitRequest(model_path="/m/big.gguf"))
    (option,) = plan.fleet
    assert (option.state, option.rpc_nodes, [e.node for e in plan.errors]) == ("free", ["b"], ["b"])
    assert plan.best() == option.model_copy(update={})
    assert [s.node for s in option.shares] == ["a", "b"] and isinstance(option.shares[0], NodeShare)
