"""``POST /api/plan``: each node's plan merged over the fleet (pure merge and fan-out with fake
agents), and through the real daemon and its local agent child."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.llamacpp import LlamaCppSettings
from agent.api.sources import FitRequest, GgufSummary, HfFileRef
from daemon.api.client import DaemonError
from daemon.api.plan import NodePlan, NodePlanError, Plan, PlanOption, PlanQuery
from daemon.sources.plan import (
    ACROSS_NODES,
    across_nodes,
    agent_request,
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
    """An agent's plan call: its answer, or the error it fails with; the requests it was sent."""

    def __init__(self, answer: NodePlan | AgentError) -> None:
        self.answer = answer
        self.requests: list[FitRequest] = []

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
    (rpc,) = two.fleet
    assert (rpc.state, rpc.message, rpc.label) == ("unavailable", ACROSS_NODES, "across nodes a, b (llama.cpp RPC)")
    assert "RPC" in rpc.message and "not run it yet" in rpc.message
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
