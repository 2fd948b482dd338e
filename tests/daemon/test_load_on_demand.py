"""Loading on demand by memory: the orchestrator unloads idle models of the node to make room.

The orchestrator talks to a hand-written fake agent (instances, start, stop, fit) whose telemetry
figures the test sets; the planner's own rules are in test_placement.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.models import (
    InstanceInfo,
    InstancesPage,
    InstanceState,
    LaunchSpec,
    TelemetrySample,
)
from agent.api.sources import FitRequest
from daemon.api.models import ModelDefinition, ModelState
from daemon.events import EventBus
from daemon.models.orchestrator import Orchestrator, OrchestratorError
from daemon.models.registry import Registry
from daemon.models.restarts import RestartBook
from daemon.nodes.links import AgentLink, Links

GiB = 1 << 30


class FakeAgent:
    """Runs what it is asked to at once; ``refusals`` are insufficient_memory answers to give first."""

    def __init__(self) -> None:
        self.running: dict[str, InstanceInfo] = {}
        self.version = 0
        self.calls: list[str] = []
        self.refusals: list[dict[str, Any]] = []

    async def instances(self, since: int | None = None, timeout: float = 0) -> InstancesPage:
        return InstancesPage(version=self.version, instances=list(self.running.values()))

    async def start(self, spec: LaunchSpec) -> InstanceInfo:
        self.calls.append(f"start {spec.instance_id}")
        if self.refusals:
            raise AgentError(409, "insufficient_memory", "not enough memory", self.refusals.pop(0))
        info = InstanceInfo(instance_id=spec.instance_id, state=InstanceState.READY, served_name=spec.served_name,
                            endpoint="http://127.0.0.1:1", pid=1000 + len(self.running))
        self.running[spec.instance_id] = info
        self.version += 1
        return info

    async def stop(self, instance_id: str, timeout: float = 10.0) -> InstanceInfo:
        self.calls.append(f"stop {instance_id}")
        info = self.running.pop(instance_id)
        self.version += 1
        return info.model_copy(update={"state": InstanceState.STOPPED})

    async def fit(self, request: FitRequest) -> Any:
        raise AgentError(422, "invalid_model_file", "not a GGUF file")


class Fleet:
    def __init__(self, tmp_path: Path, *, total: int = 16 * GiB, available: int = 15 * GiB) -> None:
        self.agent = FakeAgent()
        self.events = EventBus()
        self.registry = Registry(tmp_path / "models.json")
        self.links = Links()
        self.orch = Orchestrator(self.registry, self.events, RestartBook(tmp_path), self.links)
        self.link = AgentLink("local", self.agent, self.orch.on_instances)  # type: ignore[arg-type]
        self.links.add(self.link)
        self.link.latest_sample = TelemetrySample(seq=1, ts=0, cpu_percent=0, memory_total=total,
                                                  memory_used=total - available, memory_available=available)
        self.busy: dict[str, int] = {}

    async def open(self) -> Fleet:
        await self.link.refresh()
        return self

    async def add(self, model_id: str, budget_gib: float | None, **fields: object) -> ModelDefinition:
        return await self.registry.add(ModelDefinition.model_validate(
            {"id": model_id, "served_name": model_id, "model_path": f"/models/{model_id}.gguf",
             "memory_budget_gib": budget_gib, "start_on_request": True, **fields}))

    async def load(self, *model_ids: str) -> None:
        """Load each model as a request would, in order (so the first is the least recently used)."""
        for model_id in model_ids:
            assert (await self.orch.ensure_ready(model_id, self.in_flight)).state == ModelState.READY

    def in_flight(self, served_name: str) -> int:
        return self.busy.get(served_name, 0)

    def evictions(self) -> list[tuple[str | None, dict[str, Any]]]:
        return [(e.model, e.data) for e in self.events._page(0).events if e.type == "model.evicted"]


async def test_a_request_for_a_model_that_does_not_fit_unloads_the_least_recently_used(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()  # 16 GiB, 1 GiB reserve: 15 GiB for models
    for model_id in ("a", "b", "c"):
        await fleet.add(model_id, 4)
    await fleet.add("big", 6)
    await fleet.load("a", "b", "c")
    fleet.orch.touch("a")  # a request for "a" since: "b" is now the least recently used
    status = await fleet.orch.ensure_ready("big", fleet.in_flight)
    assert status.state == ModelState.READY
    assert fleet.agent.calls[-2:] == ["stop b", "start big"]  # 3 GiB free: one model of 4 GiB makes up the rest
    assert sorted(fleet.agent.running) == ["a", "big", "c"]
    [(victim, data)] = fleet.evictions()
    assert victim == "b" and data["for_model"] == "big"
    assert data["freed_bytes"] == 4 * GiB and data["needed_bytes"] == 6 * GiB
    assert "make room for 'big'" in data["reason"]
    evicted = fleet.orch.status_by_id("b")
    assert evicted.state == ModelState.STOPPED and evicted.evicted == data["reason"]
    assert "b" not in fleet.orch.book.wanted  # no crash restart brings it back; a request does

    assert (await fleet.orch.ensure_ready("b", fleet.in_flight)).state == ModelState.READY
    assert fleet.orch.status_by_id("b").evicted is None  # cleared by its start
    assert fleet.evictions()[-1][0] == "c"  # "a" was used after "c"


async def test_busy_and_pinned_models_stay_and_when_nothing_can_go_the_refusal_says_what_uses_memory(
        tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.add("busy", 5)
    await fleet.add("pinned", 5, pinned=True)
    await fleet.add("idle", 4)
    await fleet.add("big", 5)
    await fleet.add("huge", 12)
    await fleet.load("busy", "pinned", "idle")
    fleet.busy["busy"] = 1  # a request in flight (or waiting) for it
    assert (await fleet.orch.ensure_ready("big", fleet.in_flight)).state == ModelState.READY
    assert [victim for victim, _ in fleet.evictions()] == ["idle"]
    calls = len(fleet.agent.calls)
    with pytest.raises(OrchestratorError) as refused:
        await fleet.orch.ensure_ready("huge", fleet.in_flight)
    assert (refused.value.status, refused.value.code) == (503, "insufficient_memory")
    message = refused.value.message
    assert "needs 12.00 GiB, 0.00 GiB free" in message
    assert "busy (5.00 GiB, 1 request in flight)" in message and "pinned (5.00 GiB, pinned)" in message
    assert "big (5.00 GiB)" in message
    assert fleet.agent.calls[calls:] == []  # nothing unloaded in vain, nothing started
    assert sorted(fleet.agent.running) == ["big", "busy", "pinned"]


async def test_a_critical_model_is_not_unloaded_for_a_standard_one(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.add("crit", 8, model_class="critical")
    await fleet.add("opp", 4, model_class="opportunistic")
    await fleet.add("std", 6)
    await fleet.add("std2", 8)
    await fleet.load("opp", "crit")  # "opp" is the least recently used, and the lowest class anyway
    assert (await fleet.orch.ensure_ready("std", fleet.in_flight)).state == ModelState.READY
    assert [victim for victim, _ in fleet.evictions()] == ["opp"]
    with pytest.raises(OrchestratorError, match=r"crit \(8.00 GiB, class critical, above standard\)"):
        await fleet.orch.ensure_ready("std2", fleet.in_flight)
    assert sorted(fleet.agent.running) == ["crit", "std"]


async def test_what_the_machine_really_has_free_counts_too(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path, total=64 * GiB, available=6 * GiB).open()  # others use the rest
    await fleet.add("a", 2)
    await fleet.add("b", 4)
    await fleet.load("a")
    fleet.link.latest_sample = fleet.link.latest_sample.model_copy(  # type: ignore[union-attr]
        update={"memory_available": 4 * GiB})
    assert (await fleet.orch.ensure_ready("b", fleet.in_flight)).state == ModelState.READY
    assert [victim for victim, _ in fleet.evictions()] == ["a"]  # 3 GiB free, 4 needed


async def test_the_agents_own_refusal_makes_more_room_and_the_start_is_tried_again(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.add("a", 2)
    await fleet.add("b", 2)
    await fleet.add("c", 2)
    await fleet.load("a", "b")
    # By our figures "c" fits; the agent (its GPU, say) finds 1 GiB missing.
    fleet.agent.refusals.append({"needed_bytes": 2 * GiB, "available_bytes": 2 * GiB, "reserve_bytes": GiB,
                                 "pending_bytes": 0})
    assert (await fleet.orch.ensure_ready("c", fleet.in_flight)).state == ModelState.READY
    assert fleet.agent.calls[-3:] == ["start c", "stop a", "start c"]


async def test_a_start_by_the_user_never_unloads_anything(tmp_path: Path) -> None:
    fleet = await Fleet(tmp_path).open()
    await fleet.add("a", 10)
    await fleet.add("b", 10)
    await fleet.load("a")
    fleet.agent.refusals.append({"needed_bytes": 10 * GiB, "available_bytes": 5 * GiB})
    with pytest.raises(OrchestratorError) as refused:
        await fleet.orch.start("b")
    assert refused.value.code == "insufficient_memory" and refused.value.status == 409  # the agent's word
    assert fleet.agent.calls[-1] == "start b" and fleet.evictions() == []


# --- through the router, with the daemon's real local agent and the fake runtime --------------------


def budgets_that_do_not_both_fit(total: int, available: int) -> float:
    """A budget in GiB that the agent admits (within what the machine has free, less its reserve)
    while two of them claim more than the node has: midway between the two bounds."""
    usable, half = (available - GiB) / GiB, (total - GiB) / GiB / 2
    if usable <= half + 0.5:
        pytest.skip("this machine has less than half its memory free; the budgets would not be admitted")
    return round((usable + half) / 2, 2)


async def test_a_queued_request_for_a_model_that_does_not_fit_is_answered_after_an_eviction(
        tmp_path: Path, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import openai

    from mirbadllm import ctl
    from tests.daemon.harness import model, running_daemon
    from tests.fakes import write_fake_runtime

    starts = tmp_path / "starts.txt"
    runtime = write_fake_runtime(tmp_path / "bin", tokens=4, starts_file=str(starts))
    async with running_daemon(tmp_path / "home", runtime) as d:
        figures = await d.daemon.links["local"].client.status()
        budget = budgets_that_do_not_both_fit(figures.memory_total, figures.memory_available)
        for model_id in ("first", "second"):
            await d.client.create_model(model(model_id, str(model_file), start_on_request=True,
                                              memory_budget_gib=budget))
        client = openai.AsyncOpenAI(base_url=d.v1, api_key="unused", max_retries=0)
        try:
            for model_id in ("first", "second"):
                answer = await client.chat.completions.create(
                    model=model_id, messages=[{"role": "user", "content": "hi"}])
                assert answer.choices[0].message.content
        finally:
            await client.close()
        first, second = (await d.client.get_model("first")).status, (await d.client.get_model("second")).status
        assert (first.state, second.state) == (ModelState.STOPPED, ModelState.READY)
        assert first.evicted is not None and "make room for 'second'" in first.evicted
        page = await d.client.events(0, timeout=0)
        [evicted] = [e for e in page.events if e.type == "model.evicted"]
        assert evicted.model == "first" and evicted.data["for_model"] == "second"
        assert evicted.data["freed_bytes"] == int(budget * GiB)
        records = [r for r in await d.client.requests() if r.model == "second"]
        assert [r.status for r in records] == [200]  # waited in the queue, answered, not refused
        assert len(starts.read_text().splitlines()) == 2
        capsys.readouterr()
        assert await ctl.run(ctl.parse_args(["status"]), d.client) == 0
        shown = capsys.readouterr().out
        assert f"\n    {first.evicted}\n" in shown  # under the model's own line


# --- node "auto" ------------------------------------------------------------------------------------


class TwoNodes:
    """Two fake agents, "cpu" (32 GiB) and "gpu" (16 GiB and a GPU with ``gpu_free`` GiB free)."""

    def __init__(self, tmp_path: Path, gpu_free: float) -> None:
        from agent.api.models import GpuInfo

        self.cpu, self.gpu = Fleet(tmp_path / "cpu", total=32 * GiB, available=31 * GiB), Fleet(tmp_path / "gpu")
        self.orch = self.cpu.orch  # one orchestrator over both links
        self.gpu.link = AgentLink("gpu", self.gpu.agent, self.orch.on_instances)  # type: ignore[arg-type]
        self.gpu.link.latest_sample = TelemetrySample(
            seq=1, ts=0, cpu_percent=0, memory_total=16 * GiB, memory_used=GiB, memory_available=15 * GiB,
            gpus=[GpuInfo(index=0, name="GPU", memory_total=24 * GiB, memory_used=int((24 - gpu_free) * GiB))])
        self.cpu.links.pop("local")
        self.cpu.link.node_id = "cpu"
        self.cpu.links.add(self.cpu.link)
        self.cpu.links.add(self.gpu.link)

    async def open(self) -> TwoNodes:
        await self.cpu.link.refresh()
        await self.gpu.link.refresh()
        return self

    async def add(self, model_id: str, budget_gib: float, **fields: object) -> ModelDefinition:
        return await self.cpu.add(model_id, budget_gib, **fields)


async def test_auto_goes_to_a_gpu_with_room_and_the_status_says_where(tmp_path: Path) -> None:
    nodes = await TwoNodes(tmp_path, gpu_free=8).open()
    await nodes.add("m", 6, node="auto")
    assert nodes.orch.status_by_id("m").node == "auto"  # placed when it starts
    status = await nodes.orch.ensure_ready("m", nodes.cpu.in_flight)
    assert (status.state, status.node) == (ModelState.READY, "gpu")
    assert list(nodes.gpu.agent.running) == ["m"] and nodes.cpu.agent.running == {}
    assert nodes.orch.placed(nodes.orch.registry.require("m")).node == "gpu"
    await nodes.orch.stop("m")
    assert nodes.gpu.agent.calls[-1] == "stop m"


async def test_auto_goes_where_it_unloads_the_least(tmp_path: Path) -> None:
    nodes = await TwoNodes(tmp_path, gpu_free=2).open()  # the GPU has no room for it: memory decides
    await nodes.add("big", 10, node="auto")
    await nodes.add("gpu-resident", 12, node="gpu")
    await nodes.add("m", 8, node="auto")
    await nodes.cpu.load("big", "gpu-resident")
    assert nodes.orch.status_by_id("big").node == "cpu"  # 31 GiB free there, 15 on "gpu"
    # "cpu" has 21 GiB room, "gpu" 3: "m" fits on "cpu" without unloading anything.
    assert (await nodes.orch.ensure_ready("m", nodes.cpu.in_flight)).node == "cpu"
    assert nodes.cpu.evictions() == []


async def test_a_user_start_of_an_auto_model_that_fits_nowhere_is_refused_naming_each_node(
        tmp_path: Path) -> None:
    nodes = await TwoNodes(tmp_path, gpu_free=0).open()
    await nodes.add("m", 40, node="auto")
    with pytest.raises(OrchestratorError) as refused:
        await nodes.orch.start("m")
    assert refused.value.code == "insufficient_memory"
    assert "node 'cpu': needs 40.00 GiB" in refused.value.message and "node 'gpu'" in refused.value.message
    assert nodes.orch.status_by_id("m").node == "auto"


def test_auto_is_a_node_the_registry_keeps() -> None:
    from daemon.validation import resolve_node

    assert resolve_node("auto", {"local": "workstation"}) == "auto"
